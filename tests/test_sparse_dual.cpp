// Tests of the compile-time sparse partials (numbers/sparse_dual.hpp, math/sparse_dual.hpp, and
// sparse_partials in the fused kernels): the set algebra; every operation against the dense
// dual<T, N> and central differences; the fused kernels' partials, VJP and value_and_vjp with
// sparse partials against the same kernels with dense ones.
//
// Bit for bit: this file is compiled without contraction (g++ at -O0, other compilers with
// -ffp-contract=off: tests/CMakeLists.txt), so that the compiler contracts no multiply-add into
// an FMA differently in the two instantiations. Then a
// sparse result equals the dense one exactly, except that a partial which is zero may differ in
// its sign (the dense sum adds the absent operand's +0 or -0 product; the sparse one leaves the
// term out) -- `same` below checks exactly that. (With contraction on, as in the library's
// other builds, the two differ by the contractions' roundings: a few ulps, also between two dense
// instantiations; bench/sparse_partials.cpp's smoke run saw at most 1.2e-5 relative in float.)
#include <dualcast/dualcast.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

namespace dc = dualcast;

namespace {

// ---- the set algebra -----------------------------------------------------------------------
using dc::index_set;
using dc::detail::set_union_t;
static_assert(
    std::is_same_v<set_union_t<index_set<0, 3>, index_set<1, 3, 5>>, index_set<0, 1, 3, 5>>);
static_assert(std::is_same_v<set_union_t<index_set<2>, index_set<2>>, index_set<2>>);
static_assert(std::is_same_v<set_union_t<index_set<4>, index_set<0>>, index_set<0, 4>>);
static_assert(index_set<1, 4, 7>::position(4) == 1 && index_set<1, 4, 7>::position(3) == -1);

template <int K> using SD = dc::sparse_dual<double, index_set<K>>;
static_assert(std::is_trivially_copyable_v<SD<0>>);
// Each operation's result depends on the union of its operands' inputs, no more.
static_assert(std::is_same_v<decltype(dc::sigmoid(std::declval<SD<1>>())), SD<1>>);
static_assert(std::is_same_v<decltype(std::declval<SD<0>>() * std::declval<SD<2>>()),
                             dc::sparse_dual<double, index_set<0, 2>>>);
static_assert(std::is_same_v<decltype(std::declval<SD<3>>() + 2.0), SD<3>>);
static_assert(std::is_same_v<decltype(dc::select(true, std::declval<SD<3>>(), 1.0)), SD<3>>);
static_assert(std::is_same_v<decltype(dc::fma(std::declval<SD<0>>(), std::declval<SD<1>>(),
                                              std::declval<SD<4>>())),
                             dc::sparse_dual<double, index_set<0, 1, 4>>>);
// A variable takes values of a subset of its inputs (zeros where absent), not of others.
static_assert(std::is_convertible_v<SD<1>, dc::sparse_dual<double, index_set<0, 1>>>);

// Equal values; a zero may differ in its sign only (see the file comment).
template <class T> bool same(T a, T b) {
  if (a == T(0) && b == T(0))
    return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0 || (std::isnan(a) && std::isnan(b));
}

// A function of 4 inputs through every operation, mixing inputs of different sets.
struct mixed_fn {
  template <class A, class B, class C, class D>
  auto operator()(A const &a, B const &b, C const &c, D const &d) const {
    auto u = dc::sigmoid(a) * dc::tanh(b) + dc::exp(c * 0.5) / (d * d + 1.5);
    auto v = dc::pow(dc::abs(b) + 0.5, c) + dc::atan2(a, d) + dc::hypot(b, c) - dc::log1p(a * a);
    auto w = dc::max(a, c) * dc::min(b, d) + dc::clamp(c, -0.5, d * d) + dc::fma(a, b, d);
    auto s = dc::select(a > b, dc::sin(c) * a, dc::cos(d) - b) + dc::sqrt(b * b + 0.25) - d / a;
    auto t = dc::erf(d) + dc::softplus(c) * dc::relu(a) + dc::pow(a, 3) + dc::pow(2.0, d) +
             dc::cbrt(b + 3.0) - dc::asinh(c) * dc::atan(d);
    return dc::outputs(u, v * 0.25, w, s, t - a);
  }
};

template <class X> double partial(X const &x, int q) {
  if constexpr (dc::is_sparse_dual_v<X>) {
    using S = typename X::set;
    return S::position(q) >= 0 ? x.x.d[S::position(q)] : 0.0;
  } else {
    return x.d[q];
  }
}
template <class X> double value(X const &x) {
  if constexpr (dc::is_sparse_dual_v<X>)
    return x.x.val;
  else
    return x.val;
}

TEST_CASE("sparse duals: every operation equals the dense dual and central differences") {
  std::mt19937 rng(41);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  mixed_fn f;
  int bad_dense = 0, bad_fd = 0, checked = 0;
  for (int t = 0; t < 200; ++t) {
    std::array<double, 4> x{u(rng), u(rng), u(rng), u(rng)};
    if (std::abs(x[0] - x[1]) < 1e-3 || std::abs(x[0]) < 1e-2)
      continue; // a kink of select / max, or d / a near its pole
    using D4 = dc::dual<double, 4>;
    auto rd = f(D4::variable(x[0], 0), D4::variable(x[1], 1), D4::variable(x[2], 2),
                D4::variable(x[3], 3));
    auto rs = f(dc::seed<0>(x[0]), dc::seed<1>(x[1]), dc::seed<2>(x[2]), dc::seed<3>(x[3]));
    auto at = [&](std::array<double, 4> const &p) { return f(p[0], p[1], p[2], p[3]); };
    [&]<std::size_t... k>(std::index_sequence<k...>) {
      auto one = [&](auto const &d, auto const &s, auto kc) {
        bad_dense += !same(value(d), value(s));
        for (int q = 0; q < 4; ++q) {
          bad_dense += !same(partial(d, q), partial(s, q));
          double const h = 1e-6;
          auto xp = x, xm = x;
          xp[std::size_t(q)] += h, xm[std::size_t(q)] -= h;
          double fd =
              (dc::get<decltype(kc)::value>(at(xp)) - dc::get<decltype(kc)::value>(at(xm))) /
              (2 * h);
          bad_fd += std::abs(fd - partial(s, q)) > 1e-5 * (1 + std::abs(fd));
          ++checked;
        }
      };
      (one(dc::get<k>(rd), dc::get<k>(rs), std::integral_constant<std::size_t, k>{}), ...);
    }
    (std::make_index_sequence<5>{});
  }
  CHECK(checked > 2000);
  CHECK(bad_dense == 0);
  CHECK(bad_fd == 0);
}

TEST_CASE("sparse duals: a zero derivative wins over an absent input's infinite one") {
  // d/dy (sqrt(x) + y) at x = 0 is 1 (numbers/dual.hpp, chain_checked), on the sparse path too.
  auto x = dc::seed<0>(0.0);
  auto y = dc::seed<1>(2.0);
  auto r = dc::sqrt(x) + y;
  CHECK(std::isinf(r.x.d[0]));
  CHECK(r.x.d[1] == 1.0);
  auto q = y / x; // d/dy is inf, d/dx is -inf: no NaN from an absent 0
  CHECK(std::isinf(q.x.d[0]));
  CHECK(std::isinf(q.x.d[1]));
  auto p = dc::log(x) * y; // 0 * inf in the dense product rule's absent terms
  CHECK(!std::isnan(p.x.d[1]));
}

// ---- the fused kernels: dense against sparse partials ------------------------------------------
// Runs k (NA array inputs, K outputs) with all inputs active: values + partials, vjp and
// value_and_vjp; returns every result array in order.
template <class T, int NA, int K, class Kern, class Act>
std::vector<std::vector<T>> run_modes(Kern const &k, Act act, std::vector<std::vector<T>> const &x,
                                      std::vector<std::vector<T>> const &ybar, dc::index_t n,
                                      int threads) {
  dc::shape const s{n};
  std::vector<std::vector<T>> r(std::size_t(K + K * NA + NA + K + NA),
                                std::vector<T>(std::size_t(n), T(-7)));
  auto m = [&](std::size_t i) { return dc::view<T>(r[i].data(), s); };
  auto c = [&](std::vector<T> const &v) { return dc::view<const T>(v.data(), s); };
  dc::cpu ex{threads};
  [&]<std::size_t... a, std::size_t... o, std::size_t... p>(
      std::index_sequence<a...>, std::index_sequence<o...>, std::index_sequence<p...>) {
    dc::apply(ex, k, act, dc::out(m(o)...), dc::out(m(K + p)...), c(x[a])...);
    dc::vjp(ex, k, dc::out(m(K + K * NA + a)...), dc::in(c(x[a])...), dc::in(c(ybar[o])...));
    dc::value_and_vjp(ex, k, dc::out(m(K + K * NA + NA + o)...),
                      dc::out(m(K + K * NA + NA + K + a)...), dc::in(c(x[a])...),
                      dc::in(c(ybar[o])...));
  }
  (std::make_index_sequence<NA>{}, std::make_index_sequence<K>{},
   std::make_index_sequence<std::size_t(K * NA)>{});
  return r;
}

// The same kernel with dense partials (dk) and sparse ones (sk).
template <class T, int NA, int K, class Kern, class SKern,
          class Act = dc::active_set<dc::default_chunk>>
void dense_equals_sparse(Kern const &dk, SKern const &sk, double lo, double hi, Act act = {}) {
  constexpr auto active = []<std::size_t... a>(std::index_sequence<a...>) {
    return dc::active_set<Act::chunk, int(a)...>{};
  }
  (std::make_index_sequence<NA>{});
  (void)act;
  dc::index_t const n = 1003; // not a multiple of any SIMD width: the scalar tail too
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(lo, hi), ub(-1, 1);
  std::vector<std::vector<T>> x(NA, std::vector<T>(std::size_t(n))),
      ybar(K, std::vector<T>(std::size_t(n)));
  for (auto &v : x)
    for (auto &e : v)
      e = T(u(rng));
  for (auto &v : ybar)
    for (auto &e : v)
      e = T(ub(rng));
  auto const dense = run_modes<T, NA, K>(dk, active, x, ybar, n, 1);
  auto const sparse = run_modes<T, NA, K>(sk, active, x, ybar, n, 1);
  auto const sparse2 = run_modes<T, NA, K>(sk, active, x, ybar, n, 2);
  long bad = 0, bad_threads = 0, finite = 0;
  for (std::size_t i = 0; i < dense.size(); ++i)
    for (std::size_t e = 0; e < std::size_t(n); ++e) {
      bad += !same(dense[i][e], sparse[i][e]);
      bad_threads += std::memcmp(&sparse[i][e], &sparse2[i][e], sizeof(T)) != 0;
      finite += std::isfinite(sparse[i][e]);
    }
  CHECK(bad == 0);
  CHECK(bad_threads == 0);
  CHECK(finite > long(dense.size()) * n / 2); // not vacuous: mostly finite numbers compared
}

constexpr auto k_lstm = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});
// The GRU cell's formula (kernel/cells.hpp) with dense duals: the ready cell runs sparse ones on
// the host.
constexpr auto k_gru = dc::kernel([](auto xr, auto xz, auto xn, auto hr, auto hz, auto hn, auto h) {
  auto r = dc::sigmoid(xr + hr);
  auto z = dc::sigmoid(xz + hz);
  auto n = dc::tanh(xn + r * hn);
  return n + z * (h - n);
});
static_assert(dc::detail::has_sparse_partials<dc::cells::lstm_fn> &&
              dc::detail::has_sparse_partials<dc::cells::gru_fn> &&
              dc::detail::has_sparse_partials<dc::cells::dlstm_fn>);
constexpr dc::kernel<mixed_fn> k_mixed{mixed_fn{}};
// 10 inputs, so that chunks of 4 split them; one output ignores most inputs.
constexpr auto k_ten =
    dc::kernel([](auto a, auto b, auto c, auto d, auto e, auto f, auto g, auto h, auto i, auto j) {
      auto x = a * b + dc::tanh(c) * d - e / (f * f + 1.0f);
      return dc::outputs(x * dc::sigmoid(g) + h * i - j, dc::exp(j * 0.25f), dc::sin(a) + j);
    });
// 18 inputs: more than one evaluation takes with sparse duals (max_sparse_chunk), so they run in
// the active set's chunks of 8 too.
constexpr auto k_eighteen =
    dc::kernel([](auto a, auto b, auto c, auto d, auto e, auto f, auto g, auto h, auto i, auto j,
                  auto k, auto l, auto m, auto n, auto o, auto p, auto q, auto r) {
      auto x = a * b + dc::tanh(c) * d - e / (f * f + 1.0f) + g * h;
      auto y = dc::sigmoid(i + j) * k - l * m + dc::exp(n * 0.25f);
      return dc::outputs(x * y + o, p * q - dc::sin(r) + a, r * b);
    });
// A branch on lane masks whose sides depend on the same inputs (sparse sets must agree there).
constexpr auto k_branch = dc::kernel([](auto x, auto w) {
  if (x > 0.25f)
    return dc::log(x) * w;
  return w * x - x;
});

// float: the 8-lane batches of AVX2 (and the scalar tail); double: the operations once more.
TEST_CASE("fused kernels: sparse partials equal dense ones (partials, vjp, value_and_vjp), float") {
  SUBCASE("LSTM cell") {
    dense_equals_sparse<float, 5, 2>(k_lstm, dc::sparse_partials(k_lstm), -2, 2);
  }
  SUBCASE("every operation, mixed sets") {
    dense_equals_sparse<float, 4, 5>(k_mixed, dc::sparse_partials(k_mixed), 0.2, 1.4);
  }
  SUBCASE("10 inputs: dense in chunks of 8 and of 4, sparse in one evaluation on the host") {
    dense_equals_sparse<float, 10, 3>(k_ten, dc::sparse_partials(k_ten), -1.5, 1.5);
    dense_equals_sparse<float, 10, 3>(k_ten, dc::sparse_partials(k_ten), -1.5, 1.5,
                                      dc::active_set<4>{});
  }
  SUBCASE("18 inputs: sparse in chunks of 8 as well") {
    dense_equals_sparse<float, 18, 3>(k_eighteen, dc::sparse_partials(k_eighteen), -1.5, 1.5);
  }
  SUBCASE("a divergent branch, log at 0 in some lanes") {
    dense_equals_sparse<float, 2, 1>(k_branch, dc::sparse_partials(k_branch), -1, 1);
  }
  SUBCASE("the ready LSTM and GRU cells (sparse on the host) against their formulas, dense") {
    dense_equals_sparse<float, 5, 2>(k_lstm, dc::cells::lstm, -2, 2);
    dense_equals_sparse<float, 7, 1>(k_gru, dc::cells::gru, -2, 2);
  }
}
TEST_CASE("fused kernels: sparse partials equal dense ones, double") {
  SUBCASE("every operation, mixed sets") {
    dense_equals_sparse<double, 4, 5>(k_mixed, dc::sparse_partials(k_mixed), 0.2, 1.4);
  }
  SUBCASE("a divergent branch, log at 0 in some lanes") {
    dense_equals_sparse<double, 2, 1>(k_branch, dc::sparse_partials(k_branch), -1, 1);
  }
}

TEST_CASE("fused kernels with sparse partials: vjp against central differences (double)") {
  dc::index_t const n = 37;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.2, 1.4), ub(-1, 1);
  std::vector<std::vector<double>> x(4, std::vector<double>(std::size_t(n))),
      ybar(5, std::vector<double>(std::size_t(n)));
  for (auto &v : x)
    for (auto &e : v)
      e = u(rng);
  for (auto &v : ybar)
    for (auto &e : v)
      e = ub(rng);
  auto const r =
      run_modes<double, 4, 5>(dc::sparse_partials(k_mixed), dc::active<0, 1, 2, 3>, x, ybar, n, 1);
  mixed_fn f;
  int bad = 0;
  for (std::size_t e = 0; e < std::size_t(n); ++e)
    for (int a = 0; a < 4; ++a) {
      auto at = [&](double h) {
        std::array<double, 4> p{x[0][e], x[1][e], x[2][e], x[3][e]};
        p[std::size_t(a)] += h;
        auto o = f(p[0], p[1], p[2], p[3]);
        return ybar[0][e] * dc::get<0>(o) + ybar[1][e] * dc::get<1>(o) +
               ybar[2][e] * dc::get<2>(o) + ybar[3][e] * dc::get<3>(o) + ybar[4][e] * dc::get<4>(o);
      };
      double const h = 1e-6, fd = (at(h) - at(-h)) / (2 * h);
      double const xbar = r[std::size_t(5 + 5 * 4 + a)][e];
      bad += std::abs(fd - xbar) > 1e-5 * (1 + std::abs(fd));
    }
  CHECK(bad == 0);
}

} // namespace
