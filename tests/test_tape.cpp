// Tests of the reverse-mode tape (dualcast/autodiff.hpp): every operation's gradient against
// central finite differences in double precision (broadcast shapes, non-contiguous views,
// scalars), fused store == fused recompute == unfused == finite differences on random
// compositions, saved-tensor version checks, backward twice / keep_graph / zero_grad, the
// functional forms, an MLP and an LSTM cell step with matmuls, and tape memory per policy.
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;
using dc::shape;
using T64 = dc::tensor<double>;
using V64 = dc::var<double>;

namespace {

T64 random_tensor(shape const &s, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(std::size_t(s.size()));
  for (auto &x : v)
    x = u(g);
  return T64::from(s, v);
}

// A scalar from any output: sum(y * W) with W fixed (a generic seed for non-scalar outputs).
V64 weigh(V64 const &y) {
  if (y.size() == 1 && y.rank() == 0)
    return y;
  return dc::sum(y * random_tensor(y.dims(), 777u + unsigned(y.size())));
}

using fn = std::function<V64(std::vector<V64> const &)>;

// Compares the tape's gradients of weigh(f(xs)) with central differences.
void check_gradients(fn const &f, std::vector<T64> const &xs, double tol = 1e-6) {
  dc::tape tp;
  std::vector<V64> vs;
  for (auto const &x : xs)
    vs.push_back(tp.variable(x.clone()));
  V64 loss = weigh(f(vs));
  tp.backward(loss);
  auto eval = [&](std::vector<T64> const &in) {
    dc::tape t2;
    std::vector<V64> v2;
    for (auto const &x : in)
      v2.push_back(t2.variable(x, false));
    return weigh(f(v2)).item();
  };
  for (std::size_t i = 0; i < xs.size(); ++i) {
    T64 g = vs[i].grad();
    REQUIRE(g.defined());
    REQUIRE(g.dims() == xs[i].dims());
    auto gv = g.to_vector();
    for (dc::index_t j = 0; j < xs[i].size(); ++j) {
      std::vector<T64> plus, minus;
      for (auto const &x : xs)
        plus.push_back(x.clone()), minus.push_back(x.clone());
      double h = 1e-6;
      plus[i].data()[j] += h;
      minus[i].data()[j] -= h;
      double fd = (eval(plus) - eval(minus)) / (2 * h);
      INFO("input " << i << " element " << j);
      CHECK(gv[std::size_t(j)] == doctest::Approx(fd).epsilon(tol).scale(1.0));
    }
  }
}

std::vector<double> grads_of(V64 const &v) { return v.grad().to_vector(); }

void check_close(std::vector<double> const &a, std::vector<double> const &b, double tol = 1e-12) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(a[i] == doctest::Approx(b[i]).epsilon(tol).scale(1.0));
}

} // namespace

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

// ---- elementwise
// ----------------------------------------------------------------------------------
TEST_CASE("elementwise: binary operators with broadcasting and scalars match finite differences") {
  auto a = random_tensor({3, 4}, 1), b = random_tensor({4}, 2, 0.5, 1.5),
       c = random_tensor({3, 1}, 3, 0.5, 1.5);
  check_gradients([](auto const &v) { return v[0] + v[1]; }, {a, b});
  check_gradients([](auto const &v) { return v[0] - v[1]; }, {a, c});
  check_gradients([](auto const &v) { return v[0] * v[1]; }, {b, c});
  check_gradients([](auto const &v) { return v[0] / v[1]; }, {a, c});
  check_gradients([](auto const &v) { return dc::pow(v[1], v[0]); }, {a, b});
  check_gradients([](auto const &v) { return 2.0 * v[0] - v[1] / 3.0 + 1.0; }, {a, b});
  check_gradients([](auto const &v) { return 1.5 / v[0] - (-v[0]); }, {b});
  check_gradients([](auto const &v) { return v[0] * v[0]; }, {a}); // the same variable twice
}

TEST_CASE("elementwise: math functions match finite differences") {
  auto x = random_tensor({2, 3}, 4, 0.1, 0.9);
  std::vector<fn> fs = {
      [](auto const &v) { return dc::exp(v[0]); },
      [](auto const &v) { return dc::log(v[0]); },
      [](auto const &v) { return dc::sqrt(v[0]); },
      [](auto const &v) { return dc::sin(v[0]); },
      [](auto const &v) { return dc::cos(v[0]); },
      [](auto const &v) { return dc::tanh(v[0]); },
      [](auto const &v) { return dc::sigmoid(v[0]); },
      [](auto const &v) { return dc::softplus(v[0]); },
      [](auto const &v) { return dc::atan(v[0]); },
      [](auto const &v) { return dc::log1p(v[0]); },
      [](auto const &v) { return dc::erf(v[0]); },
      [](auto const &v) { return dc::relu(v[0] - 0.5); },
      [](auto const &v) { return dc::abs(v[0] - 0.5); },
      [](auto const &v) { return dc::asin(v[0]); },
      [](auto const &v) { return dc::cbrt(v[0]); },
      [](auto const &v) { return dc::expm1(v[0]); },
  };
  for (std::size_t i = 0; i < fs.size(); ++i) {
    INFO("function " << i);
    check_gradients(fs[i], {x});
  }
}

TEST_CASE("elementwise: non-contiguous views and scalar (rank 0) variables") {
  auto a = random_tensor({4, 3}, 5), b = random_tensor({3, 4}, 6), s = T64::scalar(0.7);
  check_gradients([](auto const &v) { return dc::transpose(v[0]) * dc::sin(v[1]); }, {a, b});
  check_gradients([](auto const &v) { return dc::slice(v[0], 0, 1, 4, 2) * v[1]; }, {a, s});
  check_gradients([](auto const &v) { return dc::exp(v[0] * v[1]); }, {s, s});
}

// ---- the fused node
// ---------------------------------------------------------------------------------
namespace {
constexpr auto cell = dc::kernel([](auto a, auto b, auto c) {
  auto t = dc::sigmoid(a) * b + dc::tanh(c);
  return dc::outputs(t * a, dc::exp(-t) * c);
});
constexpr auto branchy =
    dc::kernel([](auto x, auto y) { return dc::select(x > 0.0, x * y, dc::sin(y)); });
} // namespace

TEST_CASE("fused: store == recompute == unfused == finite differences on random compositions") {
  std::mt19937 rng(42);
  shape shapes[][3] = {
      {{3, 4}, {3, 4}, {3, 4}}, {{2, 3, 4}, {4}, {3, 1}}, {{5}, {}, {5}}, {{1, 4}, {3, 1}, {3, 4}}};
  for (auto const &sh : shapes) {
    auto a = random_tensor(sh[0], rng()), b = random_tensor(sh[1], rng()),
         c = random_tensor(sh[2], rng());
    auto run = [&](int mode) {
      dc::tape tp;
      auto va = tp.variable(a), vb = tp.variable(b), vc = tp.variable(c);
      auto z = vb * 2.0; // the fused node consumes an intermediate, too
      std::array<V64, 2> r;
      if (mode == 0)
        r = dc::fused(dc::policy::store, cell, va, z, vc);
      if (mode == 1)
        r = dc::fused(dc::policy::recompute, cell, va, z, vc);
      if (mode == 2)
        r = dc::unfused(cell, va, z, vc);
      if (mode == 3) {
        tp.fused = false;
        r = dc::call(cell, va, z, vc);
      }
      auto loss = dc::sum(weigh(r[0]) + dc::sum(r[1] * r[1]));
      tp.backward(loss);
      return std::vector<std::vector<double>>{
          grads_of(va), grads_of(vb), grads_of(vc), {loss.item()}};
    };
    auto store = run(0), recompute = run(1), unfused = run(2), switched = run(3);
    for (int i = 0; i < 4; ++i) {
      check_close(store[std::size_t(i)], recompute[std::size_t(i)], 1e-12);
      check_close(store[std::size_t(i)], unfused[std::size_t(i)], 1e-12);
      check_close(store[std::size_t(i)], switched[std::size_t(i)], 1e-12);
    }
    check_gradients(
        [](auto const &v) {
          auto r = dc::fused(dc::policy::store, cell, v[0], v[1] * 2.0, v[2]);
          return weigh(r[0]) + dc::sum(r[1] * r[1]);
        },
        {a, b, c});
  }
}

TEST_CASE("fused: data-dependent branches, constants and inactive inputs") {
  auto x = random_tensor({4, 5}, 11), y = random_tensor({5}, 12);
  for (auto p : {dc::policy::store, dc::policy::recompute})
    check_gradients([p](auto const &v) { return dc::fused(p, branchy, v[0], v[1]); }, {x, y});
  // A tensor argument is a constant (never dualized); a variable without gradients gets none.
  dc::tape tp;
  auto vx = tp.variable(x), vy = tp.constant(y);
  auto r = dc::fused(dc::policy::store, branchy, vx, vy);
  auto r2 = dc::fused(dc::policy::recompute, branchy, vx, y);
  tp.backward(dc::sum(r + r2));
  CHECK(!vy.grad().defined());
  CHECK(vx.grad().defined());
}

TEST_CASE("fused: the cost model and tape memory per policy") {
  CHECK(dc::detail::store_is_cheaper(1, 1, 1000, 4, 4000));   // sigmoid: store
  CHECK(!dc::detail::store_is_cheaper(1, 2, 1000, 4, 8000));  // x * y: recompute
  CHECK(!dc::detail::store_is_cheaper(2, 5, 1000, 4, 20000)); // LSTM cell: recompute
  auto a = random_tensor({8, 16}, 21);
  for (auto p : {dc::policy::store, dc::policy::recompute}) {
    dc::tape tp;
    auto va = tp.variable(a), vb = tp.variable(a.clone()), vc = tp.variable(a.clone());
    auto r = dc::fused(p, cell, va, vb, vc);
    std::size_t bytes = tp.saved_bytes();
    if (p == dc::policy::store)
      CHECK(bytes == 6 * 8 * 16 * sizeof(double)); // K * A partials
    else
      CHECK(bytes == 3 * 8 * 16 * sizeof(double)); // the inputs only
  }
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
    CHECK(m.find("[0, 4)") != std::string::npos);
  }
  CHECK_THROWS_AS(dc::gather(vx, 1, dc::index_array{{4, 1}, {0, 3, 0, 0}}), dc::index_error);
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
  dc::tape t3;
  auto x3 = t3.variable(random_tensor({4}, 84));
  auto l3 = dc::sum(dc::fused(dc::policy::store, dc::detail::k_sin, x3));
  x3.value().add_(T64::scalar(1.0));
  CHECK_NOTHROW(t3.backward(l3));
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

namespace {
constexpr auto lstm_cell = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});
}

TEST_CASE("an LSTM cell step with matmuls: all variants match finite differences") {
  const dc::index_t B = 3, I = 4, H = 2;
  auto X = random_tensor({B, I}, 121), H0 = random_tensor({B, H}, 122),
       C0 = random_tensor({B, H}, 123), Wx = random_tensor({I, 4 * H}, 124),
       Wh = random_tensor({H, 4 * H}, 125), bias = random_tensor({4 * H}, 126);
  for (int mode = 0; mode < 3; ++mode) {
    INFO("mode " << mode);
    check_gradients(
        [mode](auto const &v) {
          auto gates = dc::matmul(v[0], v[3]) + dc::matmul(v[1], v[4]) + v[5];
          auto gate = [&](int k) { return dc::slice(gates, 1, k * H, (k + 1) * H); };
          std::array<V64, 2> r;
          if (mode == 0)
            r = dc::fused(dc::policy::store, lstm_cell, gate(0), gate(1), gate(2), gate(3), v[2]);
          if (mode == 1)
            r = dc::fused(dc::policy::recompute, lstm_cell, gate(0), gate(1), gate(2), gate(3),
                          v[2]);
          if (mode == 2)
            r = dc::unfused(lstm_cell, gate(0), gate(1), gate(2), gate(3), v[2]);
          return weigh(r[0]) + weigh(r[1]);
        },
        {X, H0, C0, Wx, Wh, bias});
  }
}
