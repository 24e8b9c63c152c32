// Error reporting (issue 5): one test case per error. Each checks the exception's type, that its
// message names the operation and the shapes / argument / index / size / devices involved, and,
// where it applies, that the tape, the variables and the tensors are unchanged afterwards
// (values, gradients, version counters, recorded nodes) and that backward still gives the right
// gradient. Errors that test_tape.cpp and test_broadcast.cpp already check are only extended here
// (state after the error, message contents). The dtype mismatch is a compile-time error:
// tests/compile_fail/tape_dtype_mismatch.cpp.
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace tape_support;
using doctest::Contains;

namespace {

// What a variable looks like from outside: its values, version and gradient.
struct snapshot {
  std::vector<double> value, grad;
  std::uint64_t version = 0;
  bool has_grad = false;
};
snapshot snap(V64 const &v) {
  snapshot s;
  s.value = v.value().to_vector();
  s.version = v.value().version();
  s.has_grad = v.grad().defined();
  if (s.has_grad)
    s.grad = v.grad().to_vector();
  return s;
}
void check_same(snapshot const &a, snapshot const &b) {
  CHECK(a.value == b.value);
  CHECK(a.version == b.version);
  CHECK(a.has_grad == b.has_grad);
  CHECK(a.grad == b.grad);
}

// A reference gradient of sum(sin(x) * y) with respect to x: cos(x) * y (y broadcast).
std::vector<double> ref_grad_x(T64 const &x, T64 const &y) {
  auto xv = x.to_vector(), yv = y.broadcast_to(x.dims()).to_vector();
  std::vector<double> g(xv.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] = std::cos(xv[i]) * yv[i];
  return g;
}

// A memory resource that serves "CUDA" requests with host memory: lets a test create a tensor
// whose storage claims to be on cuda:0 without a GPU.
class fake_cuda_resource final : public dc::memory_resource {
public:
  void *allocate(std::size_t bytes, dc::device const &) override { return up.allocate(bytes, {}); }
  void deallocate(void *p, std::size_t bytes, dc::device const &) noexcept override {
    up.deallocate(p, bytes, {});
  }
  dc::host_resource up;
};

} // namespace

TEST_CASE("shape_error: operands that do not broadcast on the tape -- nothing recorded") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({2, 3}, 1)), y = tp.variable(random_tensor({4, 3}, 2));
  auto sx = snap(x), sy = snap(y);
  auto nodes = tp.node_count();
  CHECK_THROWS_WITH_AS(x + y, Contains("dualcast::operator+"), dc::shape_error);
  CHECK_THROWS_WITH_AS(x * y, Contains("(2, 3) and (4, 3)"), dc::shape_error);
  CHECK_THROWS_WITH_AS(dc::sin(x) * y, Contains("dualcast::operator*"), dc::shape_error);
  // the fused node names argument positions and both shapes
  CHECK_THROWS_WITH_AS(dc::fused(dc::detail::add_kernel, x, y), Contains("dualcast::fused"),
                       dc::shape_error);
  CHECK_THROWS_WITH_AS(dc::fused(dc::detail::add_kernel, x, y),
                       Contains("argument 1 of shape (4, 3)"), dc::shape_error);
  CHECK_THROWS_WITH_AS(dc::fused(dc::detail::add_kernel, x, y), Contains("(2, 3)"),
                       dc::shape_error);
  CHECK_THROWS_WITH_AS(dc::matmul(x, x), Contains("matmul"), dc::shape_error);
  CHECK(tp.node_count() == nodes);
  check_same(snap(x), sx);
  check_same(snap(y), sy);
  // the tape is still usable
  auto y1 = tp.variable(random_tensor({3}, 3));
  tp.backward(dc::sum(dc::sin(x) * y1));
  check_close(grads_of(x), ref_grad_x(x.value(), y1.value()));
}

TEST_CASE("device_error: a tensor on cuda:0 cannot be created without a CUDA resource") {
  for (int i : {0, 1}) {
    std::string dev = "cuda:" + std::to_string(i);
    CHECK_THROWS_WITH_AS(dc::tensor<float>::empty({4}, dc::device::cuda(i)), Contains(dev.c_str()),
                         dc::device_error);
    CHECK_THROWS_WITH_AS(dc::tensor<double>::zeros({2, 2}, dc::device::cuda(i)),
                         Contains("no CUDA resource"), dc::device_error);
  }
  // the failed allocations leave the pool holding nothing, and it still serves the host
  dc::pool_resource pool;
  CHECK_THROWS_AS(dc::tensor<float>::empty({4}, dc::device::cuda(0), pool), dc::device_error);
  auto st = pool.stats();
  CHECK(st.bytes_in_use == 0);
  CHECK(st.bytes_cached == 0);
  CHECK(st.system_allocations == 0);
  {
    auto t = dc::tensor<float>::empty({4}, dc::device::host(), pool);
    CHECK(pool.stats().bytes_in_use == 64);
  }
  CHECK(pool.stats().bytes_in_use == 0);
}

TEST_CASE("device_error: a cuda:0 tensor used with host tensors names both devices") {
  fake_cuda_resource res;
  auto g = T64::empty({2, 3}, dc::device::cuda(0), res);
  CHECK(dc::to_string(g.dev()) == "cuda:0");
  CHECK_THROWS_WITH_AS(g.fill_(1.0), Contains("fill_: tensor on cuda:0"), dc::device_error);
  CHECK_THROWS_WITH_AS(g.to_vector(), Contains("to_vector"), dc::device_error);
  CHECK_THROWS_WITH_AS(T64::zeros({2, 3}).add_(g), Contains("cuda:0"), dc::device_error);

  dc::tape tp;
  auto x = tp.variable(random_tensor({2, 3}, 4));
  auto sx = snap(x);
  CHECK_THROWS_WITH_AS(tp.variable(g), Contains("cuda:0"), dc::device_error);
  CHECK_THROWS_WITH_AS(tp.constant(g), Contains("host"), dc::device_error);
  CHECK_THROWS_WITH_AS((x * g).eval(), Contains("cuda:0"), dc::device_error);
  CHECK_THROWS_WITH_AS(dc::fused(dc::detail::add_kernel, x, g), Contains("argument 1"),
                       dc::device_error);
  CHECK_THROWS_WITH_AS(dc::fused(dc::detail::add_kernel, x, g), Contains("host"), dc::device_error);
  CHECK_THROWS_WITH_AS(dc::fused(dc::detail::add_kernel, x, g),
                       Contains("argument 0 is on host but argument 1 is on cuda:0"),
                       dc::device_error);
  // This translation unit is not compiled by nvcc: the CUDA tape path is not here, and says so.
  CHECK_THROWS_WITH_AS(tp.variable(g), Contains("dualcast::tape::variable"), dc::device_error);
  CHECK_THROWS_WITH_AS(tp.variable(g), Contains("nvcc"), dc::device_error);
  CHECK_THROWS_WITH_AS(g.to(dc::device::host()), Contains("dualcast::tensor::to: tensor on cuda:0"),
                       dc::device_error);
  CHECK_THROWS_WITH_AS(x.value().to(dc::device::cuda(0)), Contains("cuda:0"), dc::device_error);
  CHECK(tp.node_count() == 0);
  check_same(snap(x), sx);
  auto y = T64::full({2, 3}, 2.0);
  tp.backward(dc::sum(dc::sin(x) * y));
  check_close(grads_of(x), ref_grad_x(x.value(), y));
}

TEST_CASE("tape_error: backward on a non-scalar without seeds leaves everything unchanged") {
  dc::tape tp;
  auto X = random_tensor({2, 3}, 5), Y = random_tensor({3}, 6);
  auto x = tp.variable(X), y = tp.constant(Y);
  tp.backward(dc::sum(dc::sin(x) * y)); // a gradient exists before the error
  auto sx = snap(x);
  auto out = (dc::sin(x) * y).eval();
  auto nodes = tp.node_count();
  CHECK_THROWS_WITH_AS(tp.backward(out), Contains("dualcast::tape::backward"), dc::tape_error);
  CHECK_THROWS_WITH_AS(tp.backward(out), Contains("(2, 3)"), dc::tape_error);
  CHECK_THROWS_WITH_AS(tp.backward(std::vector<V64>{out}, std::vector<T64>{}),
                       Contains("1 outputs but 0 seeds"), dc::tape_error);
  CHECK_THROWS_WITH_AS(tp.backward(std::vector<V64>{out}, std::vector<T64>{T64::zeros({3})}),
                       Contains("seed 0 has shape (3,)"), dc::shape_error);
  CHECK(tp.node_count() == nodes);
  check_same(snap(x), sx);
  // with seeds it works and accumulates onto the earlier gradient
  tp.backward(std::vector<V64>{out}, std::vector<T64>{T64::full({2, 3}, 1.0)});
  auto g = ref_grad_x(X, Y);
  for (auto &v : g)
    v *= 2;
  check_close(grads_of(x), g);
}

TEST_CASE("tape_error: backward twice without keep_graph leaves the gradients unchanged") {
  dc::tape tp;
  auto X = random_tensor({3, 2}, 7), Y = random_tensor({2}, 8);
  auto x = tp.variable(X), y = tp.variable(Y);
  auto loss = dc::sum(dc::sin(x) * y);
  tp.backward(loss);
  auto sx = snap(x), sy = snap(y);
  CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("already freed"), dc::tape_error);
  CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("keep_graph"), dc::tape_error);
  check_same(snap(x), sx);
  check_same(snap(y), sy);
  // recording again works and gives the right gradient
  tp.clear();
  tp.zero_grad();
  tp.backward(dc::sum(dc::sin(x) * y));
  check_close(grads_of(x), ref_grad_x(X, Y));
}

namespace {
// One step of a tanh RNN: h' = tanh(x W + h U).
V64 rnn_step(V64 const &x, V64 const &h, V64 const &w, V64 const &u) {
  return dc::tanh(dc::matmul(x, w) + dc::matmul(h, u));
}
} // namespace

TEST_CASE("tape_error: backward from a loss recorded before clear() (it would give zeros)") {
  dc::tape tp;
  auto X = random_tensor({2, 3}, 11), W = random_tensor({3, 4}, 12);
  auto x = tp.constant(X), w = tp.variable(W);
  auto loss = dc::sum(dc::tanh(dc::matmul(x, w)));
  tp.clear();
  CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("before tape::clear()"), dc::tape_error);
  CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("output 0"), dc::tape_error);
  CHECK_FALSE(w.has_grad());
  // Recorded again after clear(), it gives the gradient of central differences.
  tp.backward(dc::sum(dc::tanh(dc::matmul(x, w))));
  fn const f = [](std::vector<V64> const &v) { return dc::sum(dc::tanh(dc::matmul(v[0], v[1]))); };
  auto g = grads_of(w);
  for (dc::index_t j = 0; j < W.size(); ++j)
    CHECK(g[std::size_t(j)] == doctest::Approx(central_difference(f, {X, W}, 1, j)));
}

TEST_CASE("tape_error: an RNN state carried past clear() is an error in every operation -- "
          "detach() carries its value") {
  dc::tape tp;
  auto X0 = random_tensor({2, 3}, 21), X1 = random_tensor({2, 3}, 22);
  auto W = random_tensor({3, 4}, 23), U = random_tensor({4, 4}, 24), H0 = random_tensor({2, 4}, 25);
  auto w = tp.variable(W), u = tp.variable(U);
  auto h1 = rnn_step(tp.constant(X0), tp.constant(H0), w, u);
  auto built_before = h1 * 2.0; // a lazy expression over h1, materialised after clear()
  tp.backward(dc::sum(h1 * h1));
  tp.zero_grad();
  tp.clear();

  // Every way of recording an operation on h1 says so, records nothing and names the fix (the
  // gradient would otherwise stop at h1 without a word).
  auto x1 = tp.constant(X1);
  CHECK_THROWS_WITH_AS(rnn_step(x1, h1, w, u), Contains("before tape::clear()"), dc::tape_error);
  CHECK_THROWS_WITH_AS(rnn_step(x1, h1, w, u), Contains("dualcast::detach"), dc::tape_error);
  // (rnn_step is two operations: where the compiler evaluates matmul(x1, w) first -- clang does,
  // g++ does not -- that valid node stays recorded before matmul(h1, u) fails; each failing
  // operation records nothing, counted from here one operation at a time)
  auto const recorded = tp.node_count();
  CHECK(recorded <= 2);
  CHECK_THROWS_WITH_AS(dc::matmul(h1, u), Contains("before tape::clear()"), dc::tape_error);
  CHECK_THROWS_WITH_AS((h1 * 2.0).eval(), Contains("before tape::clear()"), dc::tape_error);
  CHECK_THROWS_WITH_AS(built_before.eval(), Contains("dualcast::eval"), dc::tape_error);
  CHECK_THROWS_WITH_AS(dc::fused(dc::detail::add_kernel, h1, h1), Contains("dualcast::fused"),
                       dc::tape_error);
  CHECK_THROWS_WITH_AS(dc::cast<float>(h1), Contains("dualcast::cast"), dc::tape_error);
  CHECK_THROWS_WITH_AS(dc::slice(h1, 0, 0, 1), Contains("dualcast::slice"), dc::tape_error);
  CHECK_THROWS_WITH_AS(dc::concat(std::vector<V64>{h1, h1}, 0), Contains("before tape::clear()"),
                       dc::tape_error);
  CHECK(tp.node_count() == recorded);
  for (double g : grads_of(w)) // (zero_grad's zeros)
    CHECK(g == 0.0);

  // Its value may still be read, and used where nothing is recorded.
  {
    dc::no_grad const off(tp);
    auto twice = (h1 * 2.0).eval();
    auto hv = h1.value().to_vector(), tv = twice.value().to_vector();
    for (std::size_t i = 0; i < hv.size(); ++i)
      CHECK(tv[i] == 2 * hv[i]);
  }

  // detach(h1) carries the value as a constant: the gradient of the second step's loss is that of
  // central differences with h1 held fixed (truncated backpropagation through time).
  auto h1c = dc::detach(h1);
  auto h2 = rnn_step(x1, h1c, w, u);
  tp.backward(dc::sum(h2 * h2));
  T64 const H1 = h1.value().clone();
  fn const step2 = [&](std::vector<V64> const &v) {
    auto *t = v[0].owner();
    auto h = rnn_step(t->constant(X1), t->constant(H1), v[0], v[1]);
    return dc::sum(h * h);
  };
  auto gw = grads_of(w), gu = grads_of(u);
  for (dc::index_t j = 0; j < W.size(); ++j)
    CHECK(gw[std::size_t(j)] == doctest::Approx(central_difference(step2, {W, U}, 0, j)));
  for (dc::index_t j = 0; j < U.size(); ++j)
    CHECK(gu[std::size_t(j)] == doctest::Approx(central_difference(step2, {W, U}, 1, j)));
}

TEST_CASE("version_error: names the operation -- the other tensors are unchanged") {
  dc::tape tp;
  auto A = random_tensor({3, 3}, 9), B = random_tensor({3, 3}, 10);
  auto a = tp.variable(A.clone()), b = tp.variable(B.clone());
  auto loss = dc::sum(dc::matmul(a, b));
  auto sa = snap(a);
  b.value().scale_(2.0); // in place after matmul saved b
  auto sb = snap(b);
  CHECK(sb.version == 1);
  CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("'matmul'"), dc::version_error);
  check_same(snap(a), sa);
  check_same(snap(b), sb);
  // a lazy expression over a modified leaf reports the leaf and both versions
  auto e = dc::sin(a) * b;
  a.value().add_(T64::scalar(0.0));
  CHECK_THROWS_WITH_AS(e.eval(), Contains("version 0, now 1"), dc::version_error);
  // recording again gives the gradient at the new values
  tp.clear();
  auto l2 = dc::sum(dc::matmul(a, b));
  tp.backward(l2);
  // d sum(A B) / d A = 1 B^T: row sums of B, repeated
  auto bv = b.value().to_vector();
  std::vector<double> ga(9);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k)
      ga[std::size_t(i * 3 + k)] =
          bv[std::size_t(k * 3)] + bv[std::size_t(k * 3 + 1)] + bv[std::size_t(k * 3 + 2)];
  check_close(grads_of(a), ga);
}

TEST_CASE("version_error: a fused node saves each storage once, named by its first argument") {
  // Two rows of one parameter and another variable: the recompute node keeps two saves (W's
  // storage as argument 1, x's as argument 0); its gradient is unchanged by that.
  constexpr auto k = dc::kernel([](auto a, auto b, auto c) { return a * dc::sin(b) + c * b; });
  auto rows = [](V64 const &w) {
    return std::pair{dc::reshape(dc::slice(w, 0, 0, 1), {4}),
                     dc::reshape(dc::slice(w, 0, 1, 2), {4})};
  };
  auto const W = random_tensor({2, 4}, 11), X = random_tensor({4}, 12);
  check_gradients(
      [&](std::vector<V64> const &v) {
        auto [w0, w1] = rows(v[0]);
        return V64(dc::fused(dc::policy::recompute, k, v[1], w0, w1));
      },
      {W, X});
  dc::tape tp;
  auto w = tp.variable(W.clone()), x = tp.variable(X.clone());
  auto [w0, w1] = rows(w);
  auto loss = dc::sum(dc::fused(dc::policy::recompute, k, x, w0, w1));
  w.value().scale_(2.0); // in place after the node saved it
  CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("argument 1 saved by"), dc::version_error);
}

TEST_CASE("version_error midway through backward: leaf gradients that nodes already reached are "
          "rolled back") {
  dc::tape tp;
  auto A = random_tensor({3, 3}, 12), B = random_tensor({3, 3}, 13), C = random_tensor({3, 3}, 14);
  auto a = tp.variable(A.clone()), b = tp.variable(B.clone()), c = tp.variable(C.clone());
  tp.backward(dc::sum(c * c)); // c has a gradient from before: 2 C
  tp.clear();
  // backward reaches c (through '*') before 'matmul', whose saved b is modified below
  auto loss = dc::sum(dc::sin(dc::matmul(a, b)) * c);
  b.value().scale_(0.5);
  auto sa = snap(a), sb = snap(b), sc = snap(c);
  REQUIRE(sc.has_grad);
  CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("'matmul'"), dc::version_error);
  check_same(snap(a), sa);
  check_same(snap(b), sb);
  check_same(snap(c), sc);
  // a seed of the wrong shape for the second output changes nothing either
  tp.clear();
  V64 y1 = dc::sin(c), y2 = c * c;
  CHECK_THROWS_WITH_AS(tp.backward(std::vector<V64>{y1, y2},
                                   std::vector<T64>{T64::full(y1.dims(), 1.0), T64::zeros({3})}),
                       Contains("seed 1 has shape (3,)"), dc::shape_error);
  check_same(snap(c), sc);
  // the tape keeps working: gradients accumulate onto the unchanged ones
  tp.backward(dc::sum(c));
  auto g = c.grad().to_vector(), cv = C.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == doctest::Approx(2 * cv[i] + 1));
}

TEST_CASE("index_error: gather and index_select name the index and the bound") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({4, 3}, 11));
  auto sx = snap(x);
  CHECK_THROWS_WITH_AS(dc::index_select(x, 0, {1, 4}), Contains("dualcast::index_select: index 4"),
                       dc::index_error);
  // (negative indices count from the end: -3 is the first of 3, -4 is out of range)
  CHECK_THROWS_WITH_AS(dc::index_select(x, 1, {0, -4}), Contains("index -4"), dc::index_error);
  CHECK_THROWS_WITH_AS(dc::index_select(x, 1, {0, -4}), Contains("[-3, 3)"), dc::index_error);
  CHECK_THROWS_WITH_AS(dc::gather(x, 1, dc::index_array{{4, 1}, {0, 3, 0, 0}}),
                       Contains("dualcast::gather: index 3 at position 1"), dc::index_error);
  CHECK_THROWS_WITH_AS(dc::gather(x, 1, dc::index_array{{4, 1}, {0, 0, -4, 0}}),
                       Contains("index -4"), dc::index_error);
  CHECK_THROWS_WITH_AS(dc::gather(x, 0, dc::index_array{{1, 3}, {0, 0, 4}}), Contains("[-4, 4)"),
                       dc::index_error);
  CHECK_THROWS_WITH_AS(dc::index_select(x, 2, {0}), Contains("axis 2"), dc::index_error);
  CHECK(tp.node_count() == 0);
  check_same(snap(x), sx);
  tp.backward(dc::sum(dc::index_select(x, 0, {3, 3})));
  auto g = grads_of(x);
  for (std::size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == (i >= 9 ? 2.0 : 0.0));
}

TEST_CASE("allocation_error: absurd sizes name the bytes and never crash") {
  auto &pool = dc::default_pool();
  auto before = pool.stats();
  constexpr dc::index_t e60 = dc::index_t(1) << 60;
  // 2^60 floats = 2^62 bytes, 2^60 doubles = 2^63 bytes: fit size_t, but no memory
  CHECK_THROWS_WITH_AS(dc::tensor<float>::empty({e60}), Contains("4611686018427387904 bytes"),
                       dc::allocation_error);
  CHECK_THROWS_WITH_AS(dc::tensor<double>::zeros({e60}), Contains("9223372036854775808 bytes"),
                       dc::allocation_error);
  // element count * sizeof(T) overflows size_t, and the element count overflows index_t
  CHECK_THROWS_WITH_AS(dc::tensor<double>::empty({dc::index_t(1) << 62}),
                       Contains("4611686018427387904 elements of 8 bytes"), dc::allocation_error);
  CHECK_THROWS_WITH_AS(dc::tensor<float>::empty({e60, e60, 16}), Contains("tensor::empty"),
                       dc::allocation_error);
  CHECK_THROWS_AS(dc::tensor<double>::empty({dc::index_t(1) << 40, dc::index_t(1) << 40}),
                  dc::allocation_error);
  // the pool itself, with sizes whose rounding to a size class would overflow
  std::size_t const max = std::numeric_limits<std::size_t>::max();
  CHECK_THROWS_WITH_AS(pool.allocate(max, dc::device::host()),
                       Contains(std::to_string(max).c_str()), dc::allocation_error);
  CHECK_THROWS_AS(pool.allocate(max - 100, dc::device::host()), dc::allocation_error);
  CHECK_THROWS_AS(dc::storage::allocate(max / 2), dc::allocation_error);
  auto after = pool.stats();
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.bytes_cached == before.bytes_cached);
  // and a tape over an absurd shape fails the same way, recording nothing
  dc::tape tp;
  auto x = tp.variable(random_tensor({1, 3}, 12));
  auto bx = dc::broadcast_to(x, {e60, 3}); // a view: allocates nothing
  auto nodes = tp.node_count();
  CHECK_THROWS_AS((bx * 2.0).eval(), dc::allocation_error);
  CHECK(tp.node_count() == nodes);
  // memory still works afterwards
  auto t = dc::tensor<double>::full({1000}, 1.5);
  CHECK(t.to_vector()[999] == 1.5);
}

TEST_CASE("fused-kernel API: aliasing and wrong output shapes name the operation -- nothing "
          "written") {
  dc::cpu const ex{1};
  constexpr auto k = dc::kernel([](auto a, auto b) { return a * b; });
  std::vector<double> buf(20);
  for (std::size_t i = 0; i < buf.size(); ++i)
    buf[i] = double(i);
  auto const buf0 = buf;
  dc::view<double> x(buf.data(), {4, 4}), shifted(buf.data() + 2, {4, 4});
  std::vector<double> yb(4, 2.0);
  dc::view<double> y(yb.data(), {4});
  CHECK_THROWS_WITH_AS(dc::apply(ex, k, dc::out(shifted), x, y), Contains("dualcast::apply"),
                       dc::aliasing_error);
  CHECK_THROWS_WITH_AS(dc::apply(ex, k, dc::out(shifted), x, y), Contains("output 0"),
                       dc::aliasing_error);
  CHECK_THROWS_WITH_AS(dc::apply(ex, k, dc::out(shifted), x, y), Contains("argument 0"),
                       dc::aliasing_error);
  CHECK(buf == buf0);
  // an output of the wrong shape: the message has both shapes, nothing is written
  std::vector<double> ob(12, -7.0);
  dc::view<double> o(ob.data(), {3, 4});
  CHECK_THROWS_WITH_AS(dc::apply(ex, k, dc::out(o), x, y), Contains("(3, 4)"), dc::shape_error);
  CHECK_THROWS_WITH_AS(dc::apply(ex, k, dc::out(o), x, y), Contains("(4, 4)"), dc::shape_error);
  for (double v : ob)
    CHECK(v == -7.0);
  // vjp: a cotangent overlapping an input
  std::vector<double> gb(4, -7.0);
  dc::view<double> xbar_bad(buf.data() + 1, {4, 4});
  CHECK_THROWS_WITH_AS(
      dc::vjp(ex, k, dc::out(xbar_bad, dc::view<double>(gb.data(), {4})), dc::in(x, y), dc::in(x)),
      Contains("dualcast::vjp"), dc::aliasing_error);
  CHECK(buf == buf0);
  for (double v : gb)
    CHECK(v == -7.0);
}
