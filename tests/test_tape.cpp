// Tests of the reverse-mode tape (dualcast/autodiff.hpp): tensors and the pool, matmul,
// reductions, shape operations, the softmax family and indexing against central finite
// differences in double precision (broadcast shapes, non-contiguous views), saved-tensor version
// checks, backward twice / keep_graph / zero_grad / seeds, the functional forms and a small MLP.
// The elementwise operations, the fused node and the LSTM step are in test_tape_fused.cpp.
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace tape_support;

// ---- tensors and memory -------------------------------------------------------------------------
TEST_CASE("tensor: views share storage and the version counter") {
  auto x = T64::from({2, 3}, {1, 2, 3, 4, 5, 6});
  auto t = x.transposed();
  CHECK(t.dims() == shape{3, 2});
  CHECK(t(2, 1) == 6.0);
  CHECK(!t.is_contiguous());
  auto s = x.slice(1, 1, 3);
  CHECK(s.to_vector() == std::vector<double>{2, 3, 5, 6});
  auto b = dc::tensor<double>::from({3}, {1, 2, 3}).broadcast_to({2, 3});
  CHECK(b.to_vector() == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(x.select(0, 1).to_vector() == std::vector<double>{4, 5, 6});
  CHECK(x.reshape({3, 2}).data() == x.data());
  CHECK(t.reshape({6}).to_vector() == std::vector<double>{1, 4, 2, 5, 3, 6});
  auto v0 = x.version();
  s.fill_(0.0);
  CHECK(x.version() == v0 + 1);
  CHECK(x.to_vector() == std::vector<double>{1, 0, 0, 4, 0, 0});
  CHECK_THROWS_AS(x.reshape({4}), dc::shape_error);
  CHECK_THROWS_AS(x.slice(1, 0, 4), dc::index_error);
}

TEST_CASE("memory: the pool reuses freed blocks") {
  dc::pool_resource pool;
  for (int step = 0; step < 5; ++step) {
    auto a = dc::tensor<float>::empty({1000}, dc::device::host(), pool);
    auto b = dc::tensor<float>::empty({3000}, dc::device::host(), pool);
  }
  auto st = pool.stats();
  CHECK(st.system_allocations == 2);
  CHECK(st.reuses == 8);
  CHECK(st.bytes_in_use == 0);
  CHECK(dc::pool_resource::size_class(1000) == 1024);
  CHECK_THROWS_AS(dc::tensor<float>::empty({4}, dc::device::cuda(0), pool), dc::device_error);
}

// ---- linear algebra
// ------------------------------------------------------------------------------------
TEST_CASE("matmul: 2-D, batched, shared operand and transposed views match finite differences") {
  auto a = random_tensor({3, 4}, 31), b = random_tensor({4, 2}, 32);
  auto A = random_tensor({2, 3, 4}, 33), B = random_tensor({2, 4, 2}, 34);
  check_gradients([](auto const &v) { return dc::matmul(v[0], v[1]); }, {a, b});
  check_gradients([](auto const &v) { return dc::matmul(v[0], v[1]); }, {A, B});
  check_gradients([](auto const &v) { return dc::matmul(v[0], v[1]); }, {A, b});
  check_gradients([](auto const &v) { return dc::matmul(v[0], v[1]); }, {a, B});
  check_gradients(
      [](auto const &v) { return dc::matmul(dc::transpose(v[0]), dc::transpose(v[1])); },
      {random_tensor({4, 3}, 35), random_tensor({2, 4}, 36)});
  check_gradients([](auto const &v) { return dc::matmul(dc::slice(v[0], 1, 0, 8, 2), v[1]); },
                  {random_tensor({3, 8}, 37), b});
  // Batches in one strided-batched product: entries stored transposed, entries that must be
  // copied (a column step of 2), a batch of 3 against a shared matrix stored transposed.
  check_gradients([](auto const &v) { return dc::matmul(dc::transpose(v[0], 1, 2), v[1]); },
                  {random_tensor({2, 4, 3}, 38), B});
  check_gradients([](auto const &v) { return dc::matmul(dc::slice(v[0], 2, 0, 8, 2), v[1]); },
                  {random_tensor({2, 3, 8}, 39), B});
  check_gradients([](auto const &v) { return dc::matmul(v[0], dc::transpose(v[1], 1, 2)); },
                  {A, random_tensor({2, 2, 4}, 40)});
  check_gradients([](auto const &v) { return dc::matmul(v[0], dc::transpose(v[1])); },
                  {random_tensor({3, 5, 4}, 41), random_tensor({2, 4}, 42)});
  dc::tape tp;
  CHECK_THROWS_AS(dc::matmul(tp.variable(a), tp.variable(a)), dc::shape_error);
}

// ---- reductions
// -------------------------------------------------------------------------------------
TEST_CASE("reductions: sum, mean, max, min over axes with keepdims") {
  auto x = random_tensor({2, 3, 4}, 41);
  for (bool kd : {false, true}) {
    check_gradients([kd](auto const &v) { return dc::sum(v[0], {1}, kd); }, {x});
    check_gradients([kd](auto const &v) { return dc::sum(v[0], {0, -1}, kd); }, {x});
    check_gradients([kd](auto const &v) { return dc::mean(v[0], {2}, kd); }, {x});
    check_gradients([kd](auto const &v) { return dc::max(v[0], {1}, kd); }, {x});
    check_gradients([kd](auto const &v) { return dc::min(v[0], {0, 2}, kd); }, {x});
  }
  check_gradients([](auto const &v) { return dc::mean(v[0]); }, {x});
  check_gradients([](auto const &v) { return dc::max(v[0]); }, {x});
  dc::tape tp;
  auto vx = tp.variable(x);
  CHECK(dc::sum(vx, {0}, true).dims() == shape{1, 3, 4});
  CHECK(dc::max(vx, {2}).dims() == shape{2, 3});
  CHECK_THROWS_AS(dc::sum(vx, {3}), dc::index_error);
}

// ---- shape operations
// ---------------------------------------------------------------------------------
TEST_CASE("shape operations: transpose, permute, reshape, slice, concat, broadcast_to") {
  auto x = random_tensor({2, 3, 4}, 51), y = random_tensor({2, 2, 4}, 52),
       z = random_tensor({3, 1}, 53);
  check_gradients([](auto const &v) { return dc::transpose(v[0], 0, 2); }, {x});
  check_gradients([](auto const &v) { return dc::permute(v[0], {2, 0, 1}); }, {x});
  check_gradients([](auto const &v) { return dc::reshape(v[0], {6, 4}); }, {x});
  check_gradients([](auto const &v) { return dc::reshape(dc::transpose(v[0], 1, 2), {24}); }, {x});
  check_gradients([](auto const &v) { return dc::slice(v[0], 2, 1, 4, 2); }, {x});
  check_gradients(
      [](auto const &v) {
        return dc::concat(std::vector<V64>{v[0], v[1], v[0]}, 1);
      },
      {x, y});
  check_gradients([](auto const &v) { return dc::broadcast_to(v[0], {2, 3, 4}); }, {z});
  dc::tape tp;
  CHECK_THROWS_AS(dc::concat(std::vector<V64>{tp.variable(x), tp.variable(z)}, 0), dc::shape_error);
}

// A slice's gradient is a view of its base's gradient (tape::make_view_output): consumers write
// into the base's gradient in place. Overlapping and interleaved slices, slices of slices, the
// base used directly too, and every kind of consumer (fused elementwise, matmul into a strided
// view, reductions, indexing).
TEST_CASE("slices: gradients written into the base's gradient") {
  auto x = random_tensor({4, 6}, 54), w = random_tensor({3, 5}, 55), u = random_tensor({4, 3}, 56);
  // the LSTM pattern: disjoint column slices, each consumed by an elementwise node
  check_gradients(
      [](auto const &v) {
        return dc::slice(v[0], 1, 0, 2) * dc::sigmoid(dc::slice(v[0], 1, 2, 4)) +
               dc::tanh(dc::slice(v[0], 1, 4, 6));
      },
      {x});
  // overlapping slices, and the base used directly as well
  check_gradients(
      [](auto const &v) {
        return dc::sum(dc::slice(v[0], 0, 0, 3) * dc::slice(v[0], 0, 1, 4), {0}) +
               dc::sum(v[0] * v[0], {0});
      },
      {x});
  // overlapping slices consumed by separate nodes (the second must add to what the first wrote),
  // a slice of a slice written before and after its base slice
  check_gradients(
      [](auto const &v) {
        V64 a = (dc::slice(v[0], 1, 0, 4) * 2.0).eval(),
            b = (dc::slice(v[0], 1, 2, 6) * 3.0).eval();
        V64 c = (dc::exp(dc::slice(dc::slice(v[0], 1, 1, 5), 1, 1, 3))).eval();
        V64 d = (dc::slice(v[0], 1, 1, 5) * 0.5).eval();
        return dc::sum(a * b, {1}) + dc::sum(c, {1}) + dc::sum(d * d, {1});
      },
      {x});
  // interleaved (step 2) slices, a slice of a slice, a matmul writing a strided gradient
  check_gradients(
      [](auto const &v) {
        auto even = dc::slice(v[0], 1, 0, 6, 2), odd = dc::slice(v[0], 1, 1, 6, 2);
        auto inner = dc::slice(dc::slice(v[0], 0, 1, 4), 1, 1, 6, 2); // (3, 3)
        return dc::sum(dc::matmul(even, v[1]) + dc::matmul(odd * 2.0, v[1]), {1}) +
               dc::sum(dc::matmul(inner, dc::slice(v[1], 1, 0, 3)));
      },
      {x, w});
  // reductions and indexing consuming slices
  check_gradients(
      [](auto const &v) {
        auto a = dc::slice(v[0], 1, 1, 4);
        return dc::max(a, {1}, true) * dc::slice(v[1], 1, 0, 1) +
               dc::index_select(dc::slice(v[0], 1, 3, 6), 1, {2, 0, 2});
      },
      {x, u});
}

TEST_CASE("slices: a kept slice gradient is this backward's, the base's accumulates") {
  dc::tape tp;
  auto x = tp.variable(T64::full({2, 4}, 1.0));
  for (int round = 1; round <= 2; ++round) {
    auto s = dc::slice(x, 1, 1, 3);
    s.retain_grad();
    tp.backward(dc::sum(s * 3.0));
    auto gs = s.grad().to_vector(), gx = x.grad().to_vector();
    for (double g : gs)
      CHECK(g == 3.0);
    for (int j = 0; j < 8; ++j)
      CHECK(gx[std::size_t(j)] == ((j % 4 == 1 || j % 4 == 2) ? 3.0 * round : 0.0));
  }
}

// ---- softmax family
// -------------------------------------------------------------------------------------
TEST_CASE("softmax, log_softmax, logsumexp: stable and match finite differences") {
  auto x = random_tensor({3, 5}, 61, -3, 3);
  for (int axis : {-1, 0}) {
    check_gradients([axis](auto const &v) { return dc::softmax(v[0], axis); }, {x});
    check_gradients([axis](auto const &v) { return dc::log_softmax(v[0], axis); }, {x});
    check_gradients([axis](auto const &v) { return dc::logsumexp(v[0], axis); }, {x});
    check_gradients([axis](auto const &v) { return dc::logsumexp(v[0], axis, true); }, {x});
  }
  dc::tape tp;
  auto big = tp.variable(T64::from({1, 3}, {1000.0, 1001.0, 1002.0}));
  auto s = dc::softmax(big).value().to_vector();
  CHECK(std::isfinite(s[0]));
  CHECK(s[0] + s[1] + s[2] == doctest::Approx(1.0));
  CHECK(dc::logsumexp(big).item() ==
        doctest::Approx(1002.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-2.0))));
}

// ---- indexing
// -------------------------------------------------------------------------------------------
TEST_CASE("index_select and gather: adjoints and index errors") {
  auto x = random_tensor({4, 3}, 71);
  check_gradients([](auto const &v) { return dc::index_select(v[0], 0, {2, 0, 2, 3}); }, {x});
  check_gradients([](auto const &v) { return dc::index_select(v[0], 1, {1, 1}); }, {x});
  dc::index_array idx{{4, 2}, {0, 2, 1, 1, 2, 0, 0, 0}};
  check_gradients([idx](auto const &v) { return dc::gather(v[0], 1, idx); }, {x});
  dc::tape tp;
  auto vx = tp.variable(x);
  try {
    dc::index_select(vx, 0, {1, 4});
    FAIL("no index_error");
  } catch (dc::index_error const &e) {
    std::string m = e.what();
    CHECK(m.find("index 4") != std::string::npos);
    CHECK(m.find("[-4, 4)") != std::string::npos);
  }
  CHECK_THROWS_AS(dc::gather(vx, 1, dc::index_array{{4, 1}, {0, 3, 0, 0}}), dc::index_error);
}

TEST_CASE("index_select and index_add over rows contiguous after the axis: values, sums in "
          "position order, adjoints") {
  // 16 or more contiguous elements after the axis take the CPU's row path (ops/indexing.hpp,
  // index_blocks: an embedding's lookup and its adjoint); 600 columns are two chunks of it.
  auto const x3 = random_tensor({3, 4, 600}, 74);
  std::vector<dc::index_t> const sel{3, 1, 3, -1, 0, 3}; // (-1: 3; duplicates add up)
  std::vector<dc::index_t> const pos{3, 1, 3, 3, 0, 3};
  dc::tape tp;
  auto v = tp.variable(x3);
  auto y = dc::index_select(v, 1, sel);
  REQUIRE(y.dims() == dc::shape{3, 6, 600});
  // Element j of row i (of 6, along the axis) of outer block o, in the selection (6 rows) and in
  // x (4 rows, row pos[i]).
  auto at_y = [](dc::index_t o, dc::index_t i, dc::index_t j) {
    return std::size_t((o * 6 + i) * 600 + j);
  };
  auto at_x = [&](dc::index_t o, dc::index_t i, dc::index_t j) {
    return std::size_t((o * 4 + pos[std::size_t(i)]) * 600 + j);
  };
  // rows of `from` added onto `onto` at the selected rows, position after position
  auto scattered = [&](std::vector<double> onto, std::vector<double> const &from) {
    for (dc::index_t o = 0; o < 3; ++o)
      for (dc::index_t i = 0; i < 6; ++i)
        for (dc::index_t j = 0; j < 600; ++j)
          onto[at_x(o, i, j)] += from[at_y(o, i, j)];
    return onto;
  };
  auto const xv = x3.to_vector(), yv = y.value().to_vector();
  bool copied = true;
  for (dc::index_t o = 0; o < 3; ++o)
    for (dc::index_t i = 0; i < 6; ++i)
      for (dc::index_t j = 0; j < 600; ++j)
        copied = copied && yv[at_y(o, i, j)] == xv[at_x(o, i, j)];
  CHECK(copied);
  // The adjoint: dy scattered onto x's rows, each element's terms added in position order.
  auto const w = random_tensor(y.dims(), 75);
  tp.backward(dc::sum(y * w));
  CHECK(same_bits(v.grad().to_vector(),
                  scattered(std::vector<double>(xv.size(), 0.0), w.to_vector())));
  // index_add: the same scatter onto a copy of x (the sums start from x's values).
  auto const src = random_tensor({3, 6, 600}, 76);
  CHECK(same_bits(dc::index_add(x3, 1, sel, src).value().to_vector(),
                  scattered(xv, src.to_vector())));
  // Against central differences: an embedding-like lookup along axis 0, and both operands of
  // index_add along a middle axis, at a few elements.
  check_gradients(
      [](auto const &u) {
        return dc::index_select(u[0], 0, {2, 0, 2, 4, -1});
      },
      {random_tensor({5, 40}, 77)});
  check_gradients_at([sel](auto const &u) { return dc::index_add(u[0], 1, sel, u[1]); }, {x3, src},
                     {0, 17, 599, 600, 1811, 2400, 4000, 7199});
  // Broadcast operands (stride 0 along the outer dimension): a lookup in a broadcast matrix, and
  // a broadcast source added onto the rows.
  check_gradients_at(
      [sel](auto const &u) {
        return dc::index_select(dc::broadcast_to(u[0], dc::shape{3, 4, 600}), 1, sel);
      },
      {random_tensor({1, 4, 600}, 78)}, {0, 599, 600, 1234, 2399});
  check_gradients_at(
      [sel](auto const &u) {
        return dc::index_add(u[0], 1, sel, dc::broadcast_to(u[1], dc::shape{3, 6, 600}));
      },
      {x3, random_tensor({1, 6, 600}, 79)}, {0, 600, 1799, 3599});
}

// matmul's backward runs its two gemms side by side (dualcast::detail::side_by_side) where the
// BLAS is an OpenMP OpenBLAS and the tape has two threads: each gemm then runs on one thread.
// ctest runs this case a second time with that BLAS (tests/CMakeLists.txt) where it is installed.
TEST_CASE("matmul: both gradients side by side, the same bits as one after the other") {
  if (!dc::detail::blas_runs_nested_serially()) {
    std::printf("DUALCAST_SKIPPED: the BLAS is not an OpenMP build of OpenBLAS (the gemms run one "
                "after the other)\n");
    return;
  }
  auto const a = random_tensor({37, 53}, 91), b = random_tensor({53, 61}, 92);
  auto const w = random_tensor({37, 61}, 93);
  auto grads = [&](int threads) {
    dc::tape tp;
    tp.ex.threads = threads;
    auto va = tp.variable(a), vb = tp.variable(b);
    tp.backward(dc::sum(dc::matmul(va, vb) * w));
    return std::pair{va.grad().to_vector(), vb.grad().to_vector()};
  };
  auto const one = grads(1), two = grads(2);
  CHECK(same_bits(one.first, two.first));
  CHECK(same_bits(one.second, two.second));
  // Against central differences, and with both operands one variable (gradients that meet: one
  // after the other), and slices of one variable (disjoint: side by side).
  check_gradients_at([](auto const &v) { return dc::matmul(v[0], v[1]); }, {a, b},
                     {0, 52, 700, 1960});
  check_gradients_at([](auto const &v) { return dc::matmul(v[0], v[0]); },
                     {random_tensor({24, 24}, 94)}, {0, 25, 300, 575});
  check_gradients_at(
      [](auto const &v) {
        return dc::matmul(dc::slice(v[0], 0, 0, 20), dc::slice(v[0], 0, 20, 40));
      },
      {random_tensor({40, 20}, 95)}, {0, 199, 400, 799});
}

// ---- tape semantics
// ------------------------------------------------------------------------------------
TEST_CASE(
    "tape: in-place modification of a saved tensor raises version_error naming the operation") {
  dc::tape tp;
  auto a = tp.variable(random_tensor({3, 3}, 81)), b = tp.variable(random_tensor({3, 3}, 82));
  auto c = dc::matmul(a, b);
  auto loss = dc::sum(c);
  b.value().scale_(2.0); // modifies a tensor matmul saved
  try {
    tp.backward(loss);
    FAIL("no version_error");
  } catch (dc::version_error const &e) {
    CHECK(std::string(e.what()).find("matmul") != std::string::npos);
  }
  // A fused node under recompute saves its inputs and checks them too; under store it does not
  // need them.
  dc::tape t2;
  auto x = t2.variable(random_tensor({4}, 83));
  auto y = dc::fused(dc::policy::recompute, dc::detail::k_sin, x);
  auto l2 = dc::sum(y);
  x.value().add_(T64::scalar(1.0));
  CHECK_THROWS_AS(t2.backward(l2), dc::version_error);
  // under store the partials (cos x at the time of the forward pass) are what backward reads:
  // the write to x afterwards does not change the gradient
  dc::tape t3;
  auto X3 = random_tensor({4}, 84);
  auto x3 = t3.variable(X3.clone());
  auto l3 = dc::sum(dc::fused(dc::policy::store, dc::detail::k_sin, x3));
  x3.value().add_(T64::scalar(1.0));
  t3.backward(l3);
  auto g3 = x3.grad().to_vector(), x3v = X3.to_vector();
  for (std::size_t i = 0; i < g3.size(); ++i)
    CHECK(g3[i] == doctest::Approx(std::cos(x3v[i])).epsilon(1e-14));
}

TEST_CASE("tape: a variable taken twice by one node, and a leaf's accumulation, on small and "
          "large arrays") {
  // A fused node's later uses of a variable go through a temporary added to the first use's
  // gradient: a loop for small dense arrays, the checked call above 2^14 elements.
  for (dc::index_t n : {dc::index_t(14), dc::index_t(16384), dc::index_t(16385)}) {
    auto const x0 = random_tensor({n}, 41), c0 = random_tensor({n}, 42);
    dc::tape tp;
    auto x = tp.variable(x0);
    auto c = tp.constant(c0);
    tp.backward(dc::sum(x * c + x * x));
    auto const g = x.grad().to_vector(), xv = x0.to_vector(), cv = c0.to_vector();
    for (std::size_t i = 0; i < g.size(); ++i)
      REQUIRE(g[i] == doctest::Approx(cv[i] + 2 * xv[i]).epsilon(1e-13));
    tp.backward(dc::sum(x * c)); // a leaf adds the new gradient to what it holds
    auto const g2 = x.grad().to_vector();
    for (std::size_t i = 0; i < g.size(); ++i)
      REQUIRE(g2[i] == g[i] + cv[i]);
  }
}

TEST_CASE("tape: backward twice, keep_graph, accumulation, zero_grad, seeds") {
  auto X = random_tensor({2, 3}, 91);
  dc::tape tp;
  auto x = tp.variable(X);
  auto loss = dc::sum(dc::sin(x) * x);
  tp.backward(loss, true);
  auto g1 = x.grad().to_vector();
  tp.backward(loss); // graph kept: gradients accumulate
  auto g2 = x.grad().to_vector();
  for (std::size_t i = 0; i < g1.size(); ++i)
    CHECK(g2[i] == doctest::Approx(2 * g1[i]));
  CHECK_THROWS_AS(tp.backward(loss), dc::tape_error); // freed now
  tp.zero_grad();
  for (double v : x.grad().to_vector())
    CHECK(v == 0.0);
  tp.clear();
  auto y = dc::sin(x) * x;
  CHECK_THROWS_AS(tp.backward(y), dc::tape_error); // non-scalar without seeds
  tp.backward(std::vector<V64>{y}, std::vector<T64>{T64::full(y.dims(), 1.0)});
  check_close(x.grad().to_vector(), g1);
  dc::tape other;
  CHECK_THROWS_AS(x * other.variable(X), dc::tape_error);
}

TEST_CASE("tape: backward reads the seeds and never writes them") {
  auto X = random_tensor({3, 5}, 92);
  auto Sz = random_tensor({3, 5}, 93), Sy1 = random_tensor({3, 5}, 94),
       Sy2 = random_tensor({3, 5}, 95);
  auto const z0 = Sz.to_vector(), y10 = Sy1.to_vector(), y20 = Sy2.to_vector();
  // The reference: one scalar loss sum(Sz exp(y) + (Sy1 + Sy2) y), y = sin(x) x.
  dc::tape ref;
  auto xr = ref.variable(X);
  auto yr = dc::sin(xr) * xr;
  ref.backward(
      dc::sum(ref.constant(Sz) * dc::exp(yr) + (ref.constant(Sy1) + ref.constant(Sy2)) * yr));
  // y is an output twice and feeds z, whose node adds into y's gradient after the seeds.
  dc::tape tp;
  auto x = tp.variable(X);
  V64 y = dc::sin(x) * x; // (a var: a lazy expression would fuse into z)
  V64 z = dc::exp(y);
  tp.backward(std::vector<V64>{z, y, y}, std::vector<T64>{Sz, Sy1, Sy2});
  check_close(x.grad().to_vector(), xr.grad().to_vector());
  CHECK(Sz.to_vector() == z0);
  CHECK(Sy1.to_vector() == y10);
  CHECK(Sy2.to_vector() == y20);
  // A kept gradient and a leaf's outlive backward: theirs are copies of the seed.
  tp.clear();
  V64 w = dc::sin(x) * x;
  w.retain_grad();
  tp.zero_grad();
  tp.backward(std::vector<V64>{w, x}, std::vector<T64>{Sy1, Sy2});
  CHECK(w.grad().data() != Sy1.data());
  CHECK(w.grad().to_vector() == y10);
  CHECK(x.grad().data() != Sy2.data());
  Sy1.fill_(0.0);
  CHECK(w.grad().to_vector() == y10);
}

TEST_CASE("value_and_grad and grad") {
  auto X = random_tensor({3, 2}, 101), W = random_tensor({2, 4}, 102);
  auto f = [](auto const &x, auto const &w) { return dc::sum(dc::tanh(dc::matmul(x, w))); };
  auto [value, g] = dc::value_and_grad(f)(X, W);
  dc::tape tp;
  auto x = tp.variable(X), w = tp.variable(W);
  auto l = f(x, w);
  tp.backward(l);
  CHECK(value == doctest::Approx(l.item()));
  check_close(g[0].to_vector(), x.grad().to_vector());
  check_close(g[1].to_vector(), w.grad().to_vector());
  auto g2 = dc::grad(f)(X, W);
  check_close(g2[1].to_vector(), w.grad().to_vector());
}

// ---- models
// -----------------------------------------------------------------------------------------
TEST_CASE("a small MLP: gradients match finite differences") {
  auto X = random_tensor({5, 3}, 111), W1 = random_tensor({3, 4}, 112),
       b1 = random_tensor({4}, 113), W2 = random_tensor({4, 2}, 114), b2 = random_tensor({2}, 115);
  check_gradients(
      [](auto const &v) {
        auto h = dc::tanh(dc::matmul(v[0], v[1]) + v[2]);
        auto logits = dc::matmul(h, v[3]) + v[4];
        return -dc::mean(dc::log_softmax(logits, 1));
      },
      {X, W1, b1, W2, b2});
}
