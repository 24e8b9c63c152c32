// Regression tests for the ways a user once got a wrong gradient without an error, or a crash:
// each case here failed before its fix (issue "No silent wrong gradient anywhere"). Gradients
// against central differences in double precision where a gradient is the claim.
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

using namespace tape_support;
using doctest::Contains;

TEST_CASE("writes through element access and pointers bump the version a saved tensor is "
          "checked against") {
  auto X = random_tensor({2, 2}, 1), W0 = random_tensor({2, 2}, 2);
  {
    dc::tape tp;
    auto x = tp.variable(X), w = tp.variable(W0.clone());
    auto loss = dc::sum(dc::matmul(x, w)); // matmul saves W for dX
    auto v = w.value().version();
    w.value()(0, 0) = 10.0; // element access: seen
    CHECK(w.value().version() == v + 1);
    CHECK(double(w.value()(0, 0)) == 10.0);
    CHECK_THROWS_WITH_AS(tp.backward(loss), Contains("saved by 'matmul'"), dc::version_error);
  }
  {
    dc::tape tp;
    auto x = tp.variable(X), w = tp.variable(W0.clone());
    auto loss = dc::sum(dc::matmul(x, w));
    w.value().mutable_data()[0] = 10.0; // a writable pointer: seen when it is taken
    CHECK_THROWS_AS(tp.backward(loss), dc::version_error);
  }
  {
    dc::tape tp;
    auto x = tp.variable(X), w = tp.variable(W0.clone());
    auto loss = dc::sum(dc::matmul(x, w));
    w.value().at(1, 1) += 1.0;
    CHECK_THROWS_AS(tp.backward(loss), dc::version_error);
  }
  { // reading does not count as a write
    dc::tape tp;
    auto x = tp.variable(X), w = tp.variable(W0.clone());
    auto loss = dc::sum(dc::matmul(x, w));
    double r = w.value()(1, 0) + w.value().at(0, 1) + w.value().data()[0];
    CHECK(std::isfinite(r));
    tp.backward(loss);
    CHECK(x.grad().defined());
  }
}

TEST_CASE("element access checks the rank and the bounds") {
  auto X = random_tensor({2, 3}, 3);
  CHECK_THROWS_WITH_AS(X.at(5, 7), Contains("index 5 is out of range for dimension 0"),
                       dc::index_error);
  CHECK_THROWS_WITH_AS(X.at(1, 3), Contains("dimension 1"), dc::index_error);
  CHECK_THROWS_WITH_AS(X.at(1), Contains("1 indices for a tensor of rank 2"), dc::index_error);
  CHECK_THROWS_AS(X.at(-1, 0), dc::index_error);
  CHECK(double(X.at(1, 2)) == X.to_vector()[5]);
#if !defined(NDEBUG) // operator() is checked in debug builds
  CHECK_THROWS_AS(X(5, 7), dc::index_error);
  CHECK_THROWS_AS(X(1), dc::index_error);
#endif
}

TEST_CASE("matmul with an empty batch gives the shared operand a zero gradient") {
  auto A = T64::zeros({0, 2, 3}), B = random_tensor({3, 2}, 4);
  // fill the pool with an unrelated tensor's values first: a gradient left unwritten would show
  // them
  { auto junk = T64::full({3, 2}, 7.0); }
  dc::tape tp;
  auto a = tp.variable(A), b = tp.variable(B);
  auto c = dc::matmul(a, b);
  CHECK(c.dims() == shape{0, 2, 2});
  tp.backward(dc::sum(c) + dc::sum(b)); // b also reached directly: d/db = 1 + 0
  auto gb = b.grad().to_vector();
  for (double g : gb)
    CHECK(g == 1.0);
  dc::tape t2;
  auto a2 = t2.variable(random_tensor({2, 3}, 5)), b2 = t2.variable(T64::zeros({0, 3, 2}));
  { auto junk = T64::full({2, 3}, 7.0); }
  t2.backward(dc::sum(dc::matmul(a2, b2)) + dc::sum(a2));
  for (double g : a2.grad().to_vector())
    CHECK(g == 1.0);
}

TEST_CASE("the gradient of a parameter backward never reached is zeros -- an intermediate's is an "
          "error unless retained -- a constant's is undefined") {
  dc::tape tp;
  auto x = tp.variable(random_tensor({3}, 6)), u = tp.variable(random_tensor({2}, 7));
  auto c = tp.constant(random_tensor({3}, 8));
  auto h = dc::sin(x).eval();
  tp.backward(dc::sum(h * 2.0));
  CHECK(!u.has_grad());
  CHECK(u.grad().to_vector() == std::vector<double>{0.0, 0.0});
  CHECK(x.has_grad());
  CHECK_THROWS_WITH_AS(h.grad(), Contains("retain_grad"), dc::tape_error);
  CHECK(!c.grad().defined());
  CHECK_THROWS_WITH_AS(c.grad().to_vector(), Contains("undefined"), dc::error);
  CHECK_THROWS_WITH_AS(c.grad().item(), Contains("undefined"), dc::error);
}

TEST_CASE("a retained intermediate that backward did not reach reads as zeros, like a leaf -- the "
          "retain_grad() message only where it was not called (issue 42)") {
  dc::tape tp;
  auto x = tp.variable(T64::from({2}, {1, 2}));
  V64 y = dc::exp(x);
  y.retain_grad();
  V64 s = dc::slice(y, 0, 1, 2); // a retained view
  s.retain_grad();
  V64 z = dc::sin(x); // never retained
  V64 u = dc::cos(x); // retained only after the backward
  tp.backward(dc::sum(x * 3.0), true);
  CHECK(!y.has_grad());
  CHECK(y.grad().dims() == shape{2});
  CHECK(y.grad().to_vector() == std::vector<double>{0.0, 0.0});
  CHECK(s.grad().to_vector() == std::vector<double>{0.0});
  CHECK(x.grad().to_vector() == std::vector<double>{3.0, 3.0});
  CHECK_THROWS_WITH_AS(z.grad(), Contains("only after retain_grad() was called on it"),
                       dc::tape_error);
  u.retain_grad();
  CHECK_THROWS_WITH_AS(u.grad(), Contains("since retain_grad() was called on it"), dc::tape_error);
  // A later backward that reaches them keeps its gradients; the one after, reaching neither,
  // leaves zeros again (a kept gradient is that of the last backward).
  tp.backward(dc::sum(y * 2.0) + dc::sum(u), true);
  CHECK(y.grad().to_vector() == std::vector<double>{2.0, 2.0});
  CHECK(u.grad().to_vector() == std::vector<double>{1.0, 1.0});
  tp.backward(dc::sum(x * x), true);
  CHECK(y.grad().to_vector() == std::vector<double>{0.0, 0.0});
  CHECK(u.grad().to_vector() == std::vector<double>{0.0, 0.0});
  CHECK_THROWS_AS(z.grad(), dc::tape_error);
}

TEST_CASE("a gradient does not depend on how the program is fused: zero factors win") {
  auto X = T64::from({3}, {-1.0, 0.0, 2.0});
  auto f = [](V64 const &x) { return dc::sqrt(dc::relu(x)); };
  std::vector<double> g[3];
  for (int mode = 0; mode < 3; ++mode) {
    dc::tape tp;
    tp.fused = mode != 2;
    auto x = tp.variable(X);
    V64 y;
    if (mode == 0) // one fused node
      y = f(x);
    else // relu, then sqrt: two nodes (fused ones, or unfused mode)
      y = dc::sqrt(dc::relu(x).eval());
    tp.backward(dc::sum(y));
    g[mode] = x.grad().to_vector();
  }
  for (int mode = 0; mode < 3; ++mode) {
    INFO("mode " << mode);
    CHECK(g[mode][0] == 0.0); // relu' = 0 below 0 wins over sqrt'(0) = inf (PyTorch: 0)
    CHECK(g[mode][1] == 0.0); // and at 0 (relu'(0) = 0)
    CHECK(g[mode][2] == doctest::Approx(0.5 / std::sqrt(2.0)));
  }
  // An output nobody uses, whose partial is NaN there: d/dy of the second output only.
  constexpr auto both = dc::kernel([](auto x, auto y) { return dc::outputs(dc::pow(x, y), y); });
  for (int pol = 0; pol < 2; ++pol) {
    dc::tape tp;
    auto x = tp.variable(T64::scalar(-2.0)), y = tp.variable(T64::scalar(2.0));
    auto r = pol == 0 ? dc::fused(dc::policy::store, both, x, y)
                      : dc::fused(dc::policy::recompute, both, x, y);
    tp.backward(r[1]);
    CHECK(y.grad().item() == 1.0);
    CHECK(x.grad().item() == 0.0);
  }
}

TEST_CASE("reductions and the softmax family over empty shapes") {
  dc::tape tp;
  auto e = tp.variable(T64::zeros({0, 3}));
  auto m = dc::max(e, {1});
  CHECK(m.dims() == shape{0});
  CHECK(dc::min(e, {1}, true).dims() == shape{0, 1});
  CHECK_THROWS_WITH_AS(dc::max(e, {0}), Contains("empty axis"), dc::shape_error);
  auto mean = dc::mean(e, {0}).value().to_vector(); // over no element: NaN
  REQUIRE(mean.size() == 3);
  for (double v : mean)
    CHECK(std::isnan(v));
  CHECK(std::isnan(dc::mean(e).item()));
  auto z = tp.variable(T64::zeros({2, 0}));
  CHECK(dc::softmax(z, 1).dims() == shape{2, 0});
  CHECK(dc::log_softmax(z, -1).dims() == shape{2, 0});
  auto lse = dc::logsumexp(z, 1).value().to_vector();
  CHECK(lse == std::vector<double>{-std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity()});
  CHECK(dc::logsumexp(z, 1, true).dims() == shape{2, 1});
  tp.backward(dc::sum(dc::softmax(z, 1)) + dc::sum(m));
  CHECK(z.grad().dims() == shape{2, 0});
}

TEST_CASE("dualcast::eval of expressions of different shapes gives each its own shape") {
  auto A = random_tensor({2, 1}, 9), B = random_tensor({1, 3}, 10);
  dc::tape tp;
  auto a = tp.variable(A), b = tp.variable(B);
  auto [p, q] = dc::eval(a * b + 0.5, dc::tanh(a) - a);
  CHECK(p.dims() == shape{2, 3});
  CHECK(q.dims() == shape{2, 1});
  auto av = A.to_vector();
  for (std::size_t i = 0; i < 2; ++i)
    CHECK(q.value().to_vector()[i] == doctest::Approx(std::tanh(av[i]) - av[i]));
  check_gradients(
      [](auto const &v) {
        auto [p2, q2] = dc::eval(v[0] * v[1] + 0.5, dc::tanh(v[0]) - v[0]);
        return V64(weigh(p2) + weigh(q2));
      },
      {A, B});
}

TEST_CASE("conventions: round half to even -- max / min send a tie's gradient to the first "
          "extremal element") {
  for (double x : {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.7})
    CHECK(dc::round(x) == std::nearbyint(x));
  CHECK(dc::round(2.5) == 2.0);
  CHECK(dc::round(-1.5f) == -2.0f);
  CHECK(dc::round(dc::dual<double, 1>::variable(0.5, 0)).val == 0.0);
#if DUALCAST_HAS_SIMD
  dc::batch<double, dc::native_width<double>> b(2.5);
  CHECK(dc::round(b)[0] == 2.0);
#endif
  dc::tape tp;
  auto x = tp.variable(T64::from({2, 3}, {1.0, 3.0, 3.0, -2.0, -2.0, 0.0}));
  tp.backward(dc::sum(dc::max(x, {1})) + dc::sum(dc::min(x, {1})));
  CHECK(x.grad().to_vector() == std::vector<double>{1, 1, 0, 1, 0, 1});
}

// Found by the differential tape fuzzer (tests/test_tape_fuzz.cpp with DUALCAST_TAPE_FUZZ_WILD=1):
// inside one fused kernel the chain rule runs forward on dual numbers, where a zero derivative
// times an infinite partial (tanh'(-inf) = 0 after log'(0) = inf), or a NaN derivative times a
// zero partial (sin' at a NaN value after relu' = 0), gave NaN; the unfused tape contracts node by
// node, where zero factors win, and gives 0. The dual chain rule now uses zero-wins products where
// a partial comes out non-finite (detail::chain), so both formulations agree.
namespace {
// d/dx of f at x0 on a tape with fused == true (lazy operators: ONE fused node) and false.
template <class F> std::array<double, 2> both_ways(F f, double x0) {
  std::array<double, 2> g{};
  for (int mode = 0; mode < 2; ++mode) {
    dc::tape tp;
    tp.fused = mode == 0;
    auto x = tp.variable(T64::scalar(x0));
    tp.backward(dc::sum(V64(f(x))));
    g[std::size_t(mode)] = x.grad().item();
  }
  return g;
}
void check_same(std::array<double, 2> g) {
  INFO("fused " << g[0] << ", unfused " << g[1]);
  CHECK(std::isfinite(g[0]) == std::isfinite(g[1]));
  CHECK((!std::isfinite(g[0]) || g[0] == g[1]));
}
} // namespace

TEST_CASE("fused and unfused agree where a zero derivative meets an infinite partial inside one "
          "kernel") {
  // tanh(log(x)) at 0 is -1 (finite); d/dx = 4x / (x^2 + 1)^2 -> 0 (fused was NaN).
  check_same(both_ways([](V64 const &x) { return dc::tanh(dc::log(x)); }, 0.0));
  // exp(log(x)) at 0 is 0 (fused was NaN, unfused 0).
  check_same(both_ways([](V64 const &x) { return dc::exp(dc::log(x)); }, 0.0));
  // relu(sqrt(x)) at 0: relu'(0) = 0 after sqrt'(0) = inf; both 0 (PyTorch: 0).
  auto g = both_ways([](V64 const &x) { return dc::relu(dc::sqrt(x)); }, 0.0);
  check_same(g);
  CHECK(g[0] == 0.0);
  // A product with an infinite factor: d/dx (x * inf) * 0 -- the zero cotangent wins both ways.
  check_same(both_ways([](V64 const &x) { return (x * INFINITY) * 0.0; }, 1.0));
  // exp overflowing in a division: x / exp(x) at 1000 (0 / inf partials).
  check_same(both_ways([](V64 const &x) { return x / dc::exp(x); }, 1000.0));
}

TEST_CASE("fused and unfused agree where a NaN derivative meets a zero partial inside one kernel") {
  // log(relu(x) - 1) is NaN at x = -0.5 and its partial 0 (relu' = 0); sin' of NaN is NaN: fused
  // was NaN, unfused 0.
  check_same(both_ways([](V64 const &x) { return dc::sin(dc::log(dc::relu(x) - 1.0)); }, -0.5));
}

TEST_CASE("fused and unfused agree on whole arrays: SIMD batches with some lanes at the edge") {
  // 37 elements: full SIMD batches and a tail; zeros, negatives and large values mixed in, so a
  // batch holds lanes whose partials are non-finite beside ordinary ones (element_ops.hpp re-runs
  // such a batch lane by lane).
  std::vector<double> x0(37);
  for (std::size_t k = 0; k < x0.size(); ++k)
    x0[k] = k % 5 == 0 ? 0.0 : k % 5 == 1 ? -0.5 : k % 5 == 2 ? 800.0 : 0.1 * double(k);
  auto grads = [&](auto f) {
    std::array<std::vector<double>, 2> g;
    for (int mode = 0; mode < 2; ++mode) {
      dc::tape tp;
      tp.fused = mode == 0;
      auto x = tp.variable(T64::from({37}, x0));
      tp.backward(dc::sum(V64(f(x))));
      g[std::size_t(mode)] = x.grad().to_vector();
    }
    for (std::size_t k = 0; k < x0.size(); ++k) {
      INFO("element " << k << " at x = " << x0[k] << ": fused " << g[0][k] << ", unfused "
                      << g[1][k]);
      CHECK(std::isfinite(g[0][k]) == std::isfinite(g[1][k]));
      CHECK((!std::isfinite(g[0][k]) || g[0][k] == doctest::Approx(g[1][k]).epsilon(1e-14)));
    }
  };
  grads([](V64 const &x) { return dc::tanh(dc::log(x)); });
  grads([](V64 const &x) { return dc::exp(dc::log(x)) * 2.0 + dc::relu(dc::sqrt(x)); });
  grads([](V64 const &x) { return dc::sin(dc::log(dc::relu(x) - 1.0)); });
  grads([](V64 const &x) { return x / dc::exp(x) + dc::sqrt(x) * 0.0; });
}

TEST_CASE("a VJP written over its own inputs repairs its non-finite lanes from the inputs as they "
          "were") {
  // (sqrt(x) w, x w), the first cotangent 0 where x = 0 (d/dx infinite there: the zero factor
  // wins). The SIMD batches holding such a lane are re-run lane by lane after the row
  // (backend/cpu/map.hpp, repair_batches), reading the inputs again: x's cotangent written over x
  // itself goes through a buffer, or w's cotangent there, 0 sqrt(x) + 0.75 x, would be re-run on
  // the NaN the unguarded pass wrote over x. In place equals separate memory, bit for bit. 37
  // elements: batches and a tail, float and double.
  auto check = [](auto zero) {
    using T = decltype(zero);
    constexpr auto k =
        dc::kernel([](auto x, auto w) { return dc::outputs(dc::sqrt(x) * w, x * w); });
    dc::index_t const n = 37;
    std::vector<T> x(n), w(n), ybar(n), ybar2(n, T(0.75));
    for (dc::index_t i = 0; i < n; ++i) {
      x[std::size_t(i)] = i % 3 == 0 ? T(0) : T(0.25) * T(i);
      w[std::size_t(i)] = T(1) + T(0.5) * T(i % 4);
      ybar[std::size_t(i)] = i % 3 == 0 ? T(0) : T(1) - T(0.125) * T(i % 7);
    }
    dc::shape const s{n};
    std::vector<T> xbar(n), wbar(n), wbar2(n), in_place = x;
    auto c = [&](std::vector<T> const &v) { return dc::view<T const>(v.data(), s); };
    auto m = [&](std::vector<T> &v) { return dc::view<T>(v.data(), s); };
    dc::vjp(dc::cpu{1}, k, dc::out(m(xbar), m(wbar)), dc::in(c(x), c(w)),
            dc::in(c(ybar), c(ybar2)));
    dc::vjp(dc::cpu{1}, k, dc::out(m(in_place), m(wbar2)), dc::in(c(in_place), c(w)),
            dc::in(c(ybar), c(ybar2)));
    for (dc::index_t i = 0; i < n; ++i) {
      auto const e = std::size_t(i);
      INFO("element " << i << " at x = " << x[e]);
      double const xi = double(x[e]), wi = double(w[e]), y1 = double(ybar[e]);
      double const dx = (i % 3 == 0 ? 0.0 : y1 * wi / (2 * std::sqrt(xi))) + 0.75 * wi;
      CHECK(double(xbar[e]) == doctest::Approx(dx).epsilon(1e-6));
      CHECK(double(wbar[e]) == doctest::Approx(y1 * std::sqrt(xi) + 0.75 * xi).epsilon(1e-6));
      CHECK(in_place[e] == xbar[e]);
      CHECK(wbar2[e] == wbar[e]);
    }
  };
  check(0.0f);
  check(0.0);
}

// ---- pow at a negative base (issue 42) ---------------------------------------------------------
// x^y with x < 0 is real only at integer y, isolated points where it is not differentiable in y:
// d/dy is NaN there (PyTorch's and JAX's p log x), d/dx the ordinary y x^(y-1). A zero factor
// still wins over the NaN partial (a where that masks the element, a zero weight): the other
// terms of y's gradient stay finite, on every path (one lazily fused node, a node of its own,
// unfused, fused kernels storing or recomputing), in float and double.
namespace {
struct pow_case {
  // 19 elements (SIMD batches and a tail): negative bases at integer exponents (even elements),
  // positive bases at fractional ones (odd), one zero weight at a negative base.
  std::vector<double> x, y, w, neg;
  pow_case() {
    double const ints[] = {-2, -1, 0, 1, 2, 3};
    for (int i = 0; i < 19; ++i) {
      bool const n = i % 2 == 0;
      x.push_back(n ? -(0.75 + 0.125 * i) : 0.5 + 0.1 * i);
      y.push_back(n ? ints[(i / 2) % 6] : -1.45 + 0.3 * i);
      w.push_back(i == 10 ? 0.0 : 0.5 + 0.05 * i);
      neg.push_back(n ? 1.0 : 0.0);
    }
  }
};
double pow_dx(double x, double y) {
  double const h = 1e-6;
  return (std::pow(x + h, y) - std::pow(x - h, y)) / (2 * h);
}
double pow_dy(double x, double y) {
  double const h = 1e-6;
  return (std::pow(x, y + h) - std::pow(x, y - h)) / (2 * h);
}
template <class T, class P>
dc::var<T> weighted_sum(P const &p, dc::tensor<T> const &w, dc::tensor<T> const *mask) {
  if (mask)
    return dc::sum(dc::where(*mask, T(0), p) * w);
  return dc::sum(p * w);
}
// sum(pow(x, y) * w), the negative bases masked out by where when mask is given, in mode 0 (one
// lazy node), 1 (pow a node of its own), 2 (unfused tape: the caller's), 3 / 4 (fused kernel,
// store / recompute).
template <class T>
dc::var<T> pow_loss(int mode, dc::var<T> const &x, dc::var<T> const &y, dc::tensor<T> const &w,
                    dc::tensor<T> const *mask) {
  constexpr auto k = dc::kernel([](auto a, auto b) { return dc::outputs(dc::pow(a, b), b); });
  if (mode == 1)
    return weighted_sum(dc::pow(x, y).eval(), w, mask);
  if (mode == 3)
    return weighted_sum(dc::fused(dc::policy::store, k, x, y)[0], w, mask);
  if (mode == 4)
    return weighted_sum(dc::fused(dc::policy::recompute, k, x, y)[0], w, mask);
  return weighted_sum(dc::pow(x, y), w, mask);
}
template <class T> void check_pow_at_negative_bases() {
  pow_case const c;
  auto cast = [](std::vector<double> const &v) {
    std::vector<T> r;
    for (double e : v)
      r.push_back(T(e));
    return dc::tensor<T>::from({dc::index_t(v.size())}, r);
  };
  double const tol = std::is_same_v<T, float> ? 2e-4 : 1e-6;
  for (int mode = 0; mode < 5; ++mode)
    for (bool masked : {false, true}) {
      INFO("mode " << mode << (masked ? ", negative bases masked out" : ""));
      dc::tape tp;
      tp.fused = mode != 2;
      auto x = tp.variable(cast(c.x)), y = tp.variable(cast(c.y));
      auto const mask = cast(c.neg);
      tp.backward(pow_loss<T>(mode, x, y, cast(c.w), masked ? &mask : nullptr) + dc::sum(y * y));
      auto gx = x.grad().to_vector(), gy = y.grad().to_vector();
      for (std::size_t i = 0; i < c.x.size(); ++i) {
        INFO("x = " << c.x[i] << ", y = " << c.y[i] << ", weight " << c.w[i]);
        double const xi = c.x[i], yi = c.y[i], wi = c.w[i];
        auto near = [&](double e) { return doctest::Approx(e).epsilon(tol).scale(1.0); };
        if (xi > 0) {
          CHECK(double(gx[i]) == near(wi * pow_dx(xi, yi)));
          CHECK(double(gy[i]) == near(wi * pow_dy(xi, yi) + 2 * yi));
        } else if (masked || wi == 0) { // a zero factor wins over the NaN partial
          CHECK(double(gx[i]) == 0.0);
          CHECK(double(gy[i]) == near(2 * yi));
        } else {
          CHECK(double(gx[i]) == near(wi * pow_dx(xi, yi)));
          CHECK(std::isnan(gy[i]));
        }
      }
    }
}
} // namespace

TEST_CASE("pow at a negative base: d/dy is NaN, d/dx is y x^(y-1) -- a zero factor wins over the "
          "NaN") {
  check_pow_at_negative_bases<double>();
  check_pow_at_negative_bases<float>();
}
