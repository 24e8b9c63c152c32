// Edge cases (issue 5): NaN and Inf propagation, denormal inputs, very large and very small
// magnitudes, empty and rank-0 tensors. The math runs three ways: on plain numbers, through the
// fused kernels (dualcast::apply / vjp on arrays long enough for the SIMD path, float and double)
// and through the tape.
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include "tape_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

using namespace tape_support;

namespace {

constexpr auto k_relu = dc::kernel([](auto x) { return dc::relu(x); });
constexpr auto k_max0 = dc::kernel([](auto x) { return dc::max(x, 0.0); });
constexpr auto k_min0 = dc::kernel([](auto x) { return dc::min(x, 0.0); });
constexpr auto k_exp = dc::kernel([](auto x) { return dc::exp(x); });
constexpr auto k_log = dc::kernel([](auto x) { return dc::log(x); });
constexpr auto k_sigmoid = dc::kernel([](auto x) { return dc::sigmoid(x); });
constexpr auto k_softplus = dc::kernel([](auto x) { return dc::softplus(x); });
constexpr auto k_tanh = dc::kernel([](auto x) { return dc::tanh(x); });
constexpr auto k_poly = dc::kernel([](auto x) { return x * x + 2.0 * x; });

// Values and derivatives of a one-input kernel over xs, through apply and vjp (seed 1). The
// input is repeated to 64 elements so that whole SIMD batches are used.
template <class T> struct run_result { std::vector<T> y, dy; };
template <class T, class K> run_result<T> run(K const &k, std::vector<T> xs) {
  std::size_t n0 = xs.size();
  while (xs.size() < 64)
    xs.push_back(xs[xs.size() % n0]);
  std::vector<T> y(xs.size()), dy(xs.size()), seed(xs.size(), T(1));
  dc::view<T const> x(xs.data(), {dc::index_t(xs.size())});
  dc::cpu const ex{1};
  dc::apply(ex, k, dc::out(dc::view<T>(y.data(), x.dims())), x);
  dc::vjp(ex, k, dc::out(dc::view<T>(dy.data(), x.dims())), dc::in(x),
          dc::in(dc::view<T const>(seed.data(), x.dims())));
  // every repetition of an input gives the same result (lane position does not matter)
  for (std::size_t i = n0; i < xs.size(); ++i) {
    CHECK((y[i] == y[i % n0] || (std::isnan(y[i]) && std::isnan(y[i % n0]))));
    CHECK((dy[i] == dy[i % n0] || (std::isnan(dy[i]) && std::isnan(dy[i % n0]))));
  }
  y.resize(n0);
  dy.resize(n0);
  return {y, dy};
}

} // namespace

TEST_CASE_TEMPLATE("NaN and Inf through fused kernels and plain numbers", T, float, double) {
  T const nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  std::vector<T> xs{nan, T(1), T(-1), T(0)};
  // NaN propagates through the arithmetic, the transcendental functions, relu, min and max
  for (auto r : {run<T>(k_relu, xs), run<T>(k_max0, xs), run<T>(k_min0, xs), run<T>(k_exp, xs),
                 run<T>(k_log, xs), run<T>(k_sigmoid, xs), run<T>(k_softplus, xs),
                 run<T>(k_tanh, xs), run<T>(k_poly, xs)}) {
    CHECK(std::isnan(r.y[0]));
    CHECK(!std::isnan(r.y[1]));
  }
  CHECK(std::isnan(dc::relu(nan)));
  CHECK(std::isnan(dc::max(nan, T(0))));
  CHECK(std::isnan(dc::max(T(0), nan)));
  CHECK(std::isnan(dc::min(T(0), nan)));
  // the derivative of relu at NaN is 0 (NaN > 0 is false); of the arithmetic it is NaN
  CHECK(run<T>(k_relu, xs).dy[0] == T(0));
  CHECK(std::isnan(run<T>(k_poly, xs).dy[0]));

  std::vector<T> is{inf, -inf};
  auto e = run<T>(k_exp, is);
  CHECK(e.y[0] == inf);
  CHECK(e.y[1] == T(0));
  auto s = run<T>(k_sigmoid, is);
  CHECK(s.y[0] == T(1));
  CHECK(s.y[1] == T(0));
  CHECK(s.dy[0] == T(0));
  CHECK(s.dy[1] == T(0));
  auto t = run<T>(k_tanh, is);
  CHECK(t.y[0] == T(1));
  CHECK(t.y[1] == T(-1));
  CHECK(t.dy[0] == T(0));
  CHECK(run<T>(k_log, std::vector<T>{T(0)}).y[0] == -inf);
  CHECK(run<T>(k_relu, is).y[1] == T(0));
  CHECK(run<T>(k_softplus, is).y[0] == inf);
  CHECK(run<T>(k_softplus, is).y[1] == T(0));
}

// Stride 2 is how a tape over dual<T, 1> reads each part of its arrays; the CPU backend packs such
// rows by two vector loads per batch. Every length and both parts (value: offset 0, partial:
// offset 1), each in storage that ends exactly at the run's last element, so that the address
// sanitizer (CI's asan stage builds this file) sees any read past it.
TEST_CASE_TEMPLATE("stride-2 runs of every length: packed exactly, nothing read past the end", T,
                   double, float) {
  auto const k = dc::kernel([](auto x, auto y) { return x - y; });
  for (dc::index_t m = 1; m <= 70; ++m)
    for (dc::index_t first = 0; first < 2; ++first) {
      std::vector<T> a(std::size_t(first + 2 * m - 1)), b(a.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        a[i] = T(i) + T(0.5), b[i] = T(2 * i) - T(7);
      dc::index_t const st[1] = {2};
      dc::view<T const> const va(a.data() + first, shape{m}, st),
          vb(b.data() + first, shape{m}, st);
      std::vector<T> r(static_cast<std::size_t>(m));
      dc::apply(dc::cpu{1}, k, dc::out(dc::view<T>(r.data(), shape{m})), va, vb);
      for (dc::index_t j = 0; j < m; ++j)
        CHECK(r[std::size_t(j)] == a[std::size_t(first + 2 * j)] - b[std::size_t(first + 2 * j)]);
    }
}

// Contiguous rows are read where they are: whole batches, then one batch ending at the row's last
// element (overlapping the one before). Its outputs written in place, added to (once each, though
// the overlap computes some elements twice), strided, or written over an input; rows of every
// length across the batch widths and two chunks, in storage ending exactly at the row (the ASan
// build sees a read past it).
TEST_CASE_TEMPLATE("contiguous rows of every length: overlapping last batch, each output once", T,
                   double, float) {
  auto const k = dc::kernel([](auto x, auto y) { return dc::outputs(x * y + T(1), x - y); });
  auto const x_at = [](std::size_t i) { return T(i % 7) - T(2.5); };
  auto const y_at = [](std::size_t i) { return T(i % 5) + T(0.25); };
  for (dc::index_t m = 1; m <= 140; ++m) {
    std::size_t const n = std::size_t(m);
    std::vector<T> x(n), y(n), p(n), q(n), acc(n), strided(2 * n);
    for (std::size_t i = 0; i < n; ++i)
      x[i] = x_at(i), y[i] = y_at(i), acc[i] = T(i), strided[2 * i + 1] = T(-9);
    dc::view<T const> const vx(x.data(), shape{m}), vy(y.data(), shape{m});
    // written in place
    dc::apply(dc::cpu{1}, k,
              dc::out(dc::view<T>(p.data(), shape{m}), dc::view<T>(q.data(), shape{m})), vx, vy);
    // the first added to, the second strided
    dc::index_t const st[1] = {2};
    auto o = dc::out(dc::view<T>(acc.data(), shape{m}), dc::view<T>(strided.data(), shape{m}, st));
    o.add[0] = true;
    dc::apply(dc::cpu{1}, k, o, vx, vy);
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      T const xi = x_at(i), yi = y_at(i);
      ok = ok && p[i] == xi * yi + T(1) && q[i] == xi - yi && acc[i] == T(i) + (xi * yi + T(1)) &&
           strided[2 * i] == xi - yi && strided[2 * i + 1] == T(-9);
    }
    CHECK_MESSAGE(ok, "row of ", m);
    // written over its first input (the same elements)
    dc::apply(dc::cpu{1}, k,
              dc::out(dc::view<T>(x.data(), shape{m}), dc::view<T>(q.data(), shape{m})),
              dc::view<T const>(x.data(), shape{m}), vy);
    bool in_place = true;
    for (std::size_t i = 0; i < n; ++i)
      in_place = in_place && x[i] == x_at(i) * y_at(i) + T(1);
    CHECK_MESSAGE(in_place, "row of ", m, " written over its input");
    // added to its first input (the same elements) beside an output written in place: a chunk's
    // overlapping batch must not read the inputs a chunk before added to
    for (std::size_t i = 0; i < n; ++i)
      x[i] = x_at(i);
    auto added = dc::out(dc::view<T>(p.data(), shape{m}), dc::view<T>(x.data(), shape{m}));
    added.add[1] = true;
    dc::apply(dc::cpu{1}, k, added, dc::view<T const>(x.data(), shape{m}), vy);
    bool over_input = true;
    for (std::size_t i = 0; i < n; ++i)
      over_input =
          over_input && p[i] == x_at(i) * y_at(i) + T(1) && x[i] == x_at(i) + (x_at(i) - y_at(i));
    CHECK_MESSAGE(over_input, "row of ", m, " added to its input");
    // a VJP added to the cotangents (an operation that reads its inputs again: zero-wins repair)
    std::vector<T> xb(n, T(1)), yb(n, T(2)), hb(n), cb(n);
    for (std::size_t i = 0; i < n; ++i)
      x[i] = x_at(i), hb[i] = T(i % 3) - T(1), cb[i] = T(0.5);
    dc::vjp(dc::cpu{1}, k,
            dc::add_to(dc::view<T>(xb.data(), shape{m}), dc::view<T>(yb.data(), shape{m})),
            dc::in(vx, vy),
            dc::in(dc::view<T const>(hb.data(), shape{m}), dc::view<T const>(cb.data(), shape{m})));
    bool vjp_ok = true;
    for (std::size_t i = 0; i < n; ++i)
      vjp_ok = vjp_ok && xb[i] == T(1) + (hb[i] * y_at(i) + cb[i]) &&
               yb[i] == T(2) + (hb[i] * x_at(i) - cb[i]);
    CHECK_MESSAGE(vjp_ok, "VJP of a row of ", m);
  }
}

TEST_CASE("NaN and Inf on the tape: values and gradients") {
  double const nan = std::numeric_limits<double>::quiet_NaN();
  dc::tape tp;
  auto x = tp.variable(T64::from({4}, {nan, 2.0, -3.0, 0.5}));
  auto loss = dc::sum(dc::relu(x) * 3.0);
  CHECK(std::isnan(loss.item()));
  tp.backward(loss);
  CHECK(grads_of(x) == std::vector<double>{0.0, 3.0, 0.0, 3.0});
  // a reduction sends NaN on to everything after it
  dc::tape t2;
  auto y = t2.variable(T64::from({2, 2}, {nan, 1.0, 2.0, 3.0}));
  auto sm = dc::softmax(y, -1).value().to_vector();
  CHECK(std::isnan(sm[0]));
  CHECK(std::isnan(sm[1]));
  CHECK(sm[2] + sm[3] == doctest::Approx(1.0));
}

TEST_CASE_TEMPLATE("denormal inputs", T, float, double) {
  T const d = std::numeric_limits<T>::min() / T(2); // 1 / d is still finite
  REQUIRE(std::fpclassify(d) == FP_SUBNORMAL);
  std::vector<T> xs{d, -d};
  auto e = run<T>(k_exp, xs);
  CHECK(e.y[0] == T(1));
  CHECK(e.dy[0] == T(1));
  auto l = run<T>(k_log, xs);
  CHECK(l.y[0] == doctest::Approx(double(std::log(d))).epsilon(1e-6));
  CHECK(std::isfinite(l.y[0]));
  CHECK(l.dy[0] == doctest::Approx(double(T(1) / d)).epsilon(1e-6));
  CHECK(run<T>(k_sigmoid, xs).y[0] == T(0.5));
  auto t = run<T>(k_tanh, xs);
  CHECK(t.y[0] == d);
  CHECK(t.y[1] == -d);
  CHECK(t.dy[0] == T(1));
  CHECK(run<T>(k_relu, xs).y[1] == T(0));
  CHECK(run<T>(k_poly, xs).y[0] == doctest::Approx(double(2 * d)));
  CHECK(run<T>(k_softplus, xs).y[0] == doctest::Approx(std::log(2.0)));
}

TEST_CASE_TEMPLATE("large and small magnitudes: stable sigmoid, softplus, tanh, exp, log", T, float,
                   double) {
  std::vector<T> xs{T(-1e4), T(-100), T(-20), T(-1e-4), T(1e-4), T(20), T(100), T(1e4)};
  auto check_all = [&](std::vector<T> const &sg, std::vector<T> const &dsg,
                       std::vector<T> const &sp, std::vector<T> const &dsp,
                       std::vector<T> const &th, std::vector<T> const &dth) {
    for (std::size_t i = 0; i < xs.size(); ++i) {
      INFO("x = " << xs[i]);
      CHECK(std::isfinite(sg[i]));
      CHECK(std::isfinite(dsg[i]));
      CHECK(std::isfinite(sp[i]));
      CHECK(std::isfinite(dsp[i]));
      CHECK(std::isfinite(th[i]));
      CHECK(std::isfinite(dth[i]));
      CHECK(sg[i] == doctest::Approx(1.0 / (1.0 + std::exp(-double(xs[i])))).epsilon(1e-5));
      double xd = double(xs[i]);
      CHECK(sp[i] ==
            doctest::Approx(std::max(xd, 0.0) + std::log1p(std::exp(-std::abs(xd)))).epsilon(1e-5));
    }
    CHECK(sg.front() == T(0));
    CHECK(sg.back() == T(1));
    CHECK(sp.back() == T(1e4));
    CHECK(sp.front() >= T(0));
    CHECK(sp.front() < T(1e-30));
    CHECK(dsp.back() == T(1));
    CHECK(dsp.front() == T(0));
    CHECK(th.front() == T(-1));
    CHECK(th.back() == T(1));
    CHECK(dth.back() == T(0));
  };
  // plain numbers and duals
  std::vector<T> sg, dsg, sp, dsp, th, dth;
  for (T x : xs) {
    auto v = dc::dual<T, 1>::variable(x, 0);
    auto a = dc::sigmoid(v), b = dc::softplus(v), c = dc::tanh(v);
    CHECK(a.val == dc::sigmoid(x));
    CHECK(b.val == dc::softplus(x));
    sg.push_back(a.val), dsg.push_back(a.d[0]), sp.push_back(b.val), dsp.push_back(b.d[0]);
    th.push_back(c.val), dth.push_back(c.d[0]);
  }
  check_all(sg, dsg, sp, dsp, th, dth);
  // fused kernels on SIMD batches
  auto rs = run<T>(k_sigmoid, xs), rp = run<T>(k_softplus, xs), rt = run<T>(k_tanh, xs);
  check_all(rs.y, rs.dy, rp.y, rp.dy, rt.y, rt.dy);
  // exp overflows to inf where the true value does (no stable formula exists); log is finite
  auto e = run<T>(k_exp, xs);
  CHECK(e.y.back() == std::numeric_limits<T>::infinity());
  CHECK(e.y.front() == T(0));
  CHECK(e.y[5] == doctest::Approx(std::exp(20.0)).epsilon(1e-5));
  auto l = run<T>(k_log, std::vector<T>{T(1e4), T(1e-30)});
  CHECK(l.y[0] == doctest::Approx(std::log(1e4)).epsilon(1e-6));
  CHECK(l.y[1] == doctest::Approx(std::log(double(T(1e-30)))).epsilon(1e-6));
  CHECK(l.dy[0] == doctest::Approx(1e-4).epsilon(1e-6));
}

TEST_CASE("large magnitudes on the tape: sigmoid, softplus, logsumexp, softmax, log_softmax") {
  dc::tape tp;
  auto x = tp.variable(T64::from({2, 3}, {1e4, -1e4, 0.0, -1e4, -1e4 + 1.0, -1e4 + 2.0}));
  auto lse = dc::logsumexp(x, -1);
  auto lv = lse.value().to_vector();
  CHECK(lv[0] == 1e4);
  CHECK(lv[1] == doctest::Approx(-1e4 + 2.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-2.0))));
  auto sm = dc::softmax(x, -1).value().to_vector();
  CHECK(sm[0] == 1.0);
  CHECK(sm[1] == 0.0);
  CHECK(sm[2] == 0.0);
  double z = 1.0 + std::exp(-1.0) + std::exp(-2.0);
  CHECK(sm[5] == doctest::Approx(1.0 / z));
  auto ls = dc::log_softmax(x, -1).value().to_vector();
  CHECK(ls[0] == 0.0);
  CHECK(ls[1] == -2e4);
  CHECK(ls[2] == -1e4);
  CHECK(ls[3] == doctest::Approx(-2.0 - std::log(z)));
  tp.backward(dc::sum(lse));
  auto g = grads_of(x); // softmax of each row
  for (double v : g)
    CHECK(std::isfinite(v));
  CHECK(g[0] == 1.0);
  CHECK(g[1] == 0.0);
  CHECK(g[5] == doctest::Approx(1.0 / z));

  dc::tape t2;
  auto y = t2.variable(T64::from({4}, {-1e4, -30.0, 30.0, 1e4}));
  auto loss = dc::sum(dc::sigmoid(y) + dc::softplus(y) * 2.0);
  CHECK(loss.item() == doctest::Approx(2.0 + 2.0 * (30.0 + 1e4)).epsilon(1e-12));
  t2.backward(loss);
  auto gy = grads_of(y);
  for (double v : gy)
    CHECK(std::isfinite(v));
  CHECK(gy[0] == 0.0);
  CHECK(gy[3] == 2.0);
}

TEST_CASE("empty tensors (a zero dimension) through tape operations") {
  dc::tape tp;
  auto x = tp.variable(T64::zeros({0, 3}));
  auto b = tp.variable(T64::from({3}, {1, 2, 3}));
  auto s = dc::sum(dc::sin(x) * b + x);
  CHECK(s.dims() == shape{});
  CHECK(s.item() == 0.0);
  auto cols = dc::sum(x * 2.0, {0});
  CHECK(cols.dims() == shape{3});
  CHECK(cols.value().to_vector() == std::vector<double>{0, 0, 0});
  CHECK(dc::mean(x, {1}).dims() == shape{0});
  CHECK(dc::transpose(x).dims() == shape{3, 0});
  tp.backward(s + dc::sum(cols));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dims() == shape{0, 3});
  CHECK(x.grad().size() == 0);
  // b is broadcast over zero rows: its gradient is a zero sum
  REQUIRE(b.grad().defined());
  CHECK(b.grad().dims() == shape{3});
  CHECK(grads_of(b) == std::vector<double>{0, 0, 0});
  // the extremum of no element is undefined; softmax over an empty axis is empty
  CHECK_THROWS_AS(dc::max(x, {0}), dc::shape_error);
  CHECK(dc::softmax(x, 0).dims() == x.dims());
}

TEST_CASE("rank-0 tensors on the tape and in fused kernels") {
  dc::tape tp;
  double const x0 = 0.7, y0 = -1.3;
  auto x = tp.variable(T64::scalar(x0)), y = tp.variable(T64::scalar(y0));
  auto m = tp.variable(T64::from({2}, {1.0, 2.0}));
  auto f = dc::sin(x) * y + dc::exp(x);
  auto loss = dc::sum(f * m); // rank 0 broadcast against rank 1
  CHECK(loss.dims() == shape{});
  CHECK(loss.item() == doctest::Approx(3.0 * (std::sin(x0) * y0 + std::exp(x0))));
  tp.backward(loss);
  CHECK(x.grad().dims() == shape{});
  CHECK(x.grad().item() == doctest::Approx(3.0 * (std::cos(x0) * y0 + std::exp(x0))));
  CHECK(y.grad().item() == doctest::Approx(3.0 * std::sin(x0)));
  CHECK(dc::sum(x).item() == x0);
  // fused kernel on rank-0 views
  double xv = x0, yv = 0, gv = 0, seed = 1;
  dc::view<double const> xs(&xv, shape{});
  dc::apply(dc::cpu{1}, k_poly, dc::out(dc::view<double>(&yv, shape{})), xs);
  dc::vjp(dc::cpu{1}, k_poly, dc::out(dc::view<double>(&gv, shape{})), dc::in(xs),
          dc::in(dc::view<double const>(&seed, shape{})));
  CHECK(yv == doctest::Approx(x0 * x0 + 2 * x0));
  CHECK(gv == doctest::Approx(2 * x0 + 2));
}
