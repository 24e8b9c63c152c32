// Tests of every math function of dualcast on duals, nested duals and SIMD batches.
//
// Derivatives are checked against central finite differences (fourth-order, five-point
// stencil) computed in double precision at random points of each function's domain, away from
// kinks, poles and branch cuts; second derivatives (nested duals) against central differences
// of the first derivative. SIMD batches are checked lane by lane against the scalar functions.
// The conventions at non-differentiable points are checked exactly as documented at the top of
// dualcast/math/dual.hpp.
//
// Adding a function is one line in the tables below: name, lambda, sampling box, and optionally
// a predicate that rejects samples near a kink / pole / cut and, for the float SIMD polynomials,
// their ulp bound (the other batch functions must equal the scalar ones exactly).
#include <dualcast/math/functions.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dc = dualcast;
using dc::dual;

namespace {

// ============================================================================================
// The tables
// ============================================================================================
template <int K> using point = std::array<double, K>;

// How the SIMD batch versions compare with the scalar functions. float_ulps / double_ulps: the
// batch version is a polynomial / rational approximation, within this many ulp of the C library
// (0: bitwise equal). deriv_from_value: the derivative is formed from the rounded value with
// cancellation (1 - tanh^2, s (1 - s)), so its rounding is relative to the value's magnitude.
struct simd_opt {
  std::uint64_t float_ulps = 0;
  bool deriv_from_value = false;
  std::uint64_t double_ulps = 0;
};
// Measured maxima over (nearly) all floats, g++ 12 / clang 14: exp 1, expm1 2, log 1, log1p 2,
// tanh 5 / 6, sigmoid 4, softplus 3; over (nearly) all doubles: exp 2, expm1 4, tanh 2, sigmoid 3
// (log, log1p: the C library lane by lane).
constexpr simd_opt poly{4, false, 4};
constexpr simd_opt poly_tanh{6, true, 4};
constexpr simd_opt poly_sigmoid{4, true, 4};

template <int K, class F> struct fn_case {
  char const *name;
  F f;
  point<K> lo, hi;              // samples are drawn uniformly from this box...
  bool (*ok)(point<K> const &); // ...and rejected where this is false (null: keep all)
  simd_opt simd;
};
template <class F>
constexpr auto fn1(char const *name, double lo, double hi, F f,
                   bool (*ok)(point<1> const &) = nullptr, simd_opt s = {}) {
  return fn_case<1, F>{name, f, {lo}, {hi}, ok, s};
}
template <class F>
constexpr auto fn2(char const *name, point<2> lo, point<2> hi, F f,
                   bool (*ok)(point<2> const &) = nullptr) {
  return fn_case<2, F>{name, f, lo, hi, ok, {}};
}
template <class F>
constexpr auto fn3(char const *name, point<3> lo, point<3> hi, F f,
                   bool (*ok)(point<3> const &) = nullptr) {
  return fn_case<3, F>{name, f, lo, hi, ok, {}};
}

// A constant of x's primal type (double, float or a batch), so that the lambdas stay generic.
template <class X> auto k(X const &, double v) {
  return decltype(dc::value_of(std::declval<X const &>()))(v);
}

// Sample filters: keep a margin from kinks, poles and branch cuts.
bool not_near_0(point<1> const &p) { return std::abs(p[0]) > 0.05; }
bool not_near_1(point<1> const &p) { return std::abs(p[0] - 1) > 0.05; }
bool not_near_int(point<1> const &p) { return std::abs(p[0] - std::round(p[0])) > 0.05; }
bool not_near_half(point<1> const &p) { return std::abs(p[0] - std::floor(p[0]) - 0.5) > 0.05; }
bool untied(point<2> const &p) { return std::abs(p[0] - p[1]) > 0.05; }
bool hypot_ok(point<2> const &p) { return std::hypot(p[0], p[1]) > 0.1; }
// atan2(y, x): away from the origin and from the cut along the negative x axis.
bool atan2_ok(point<2> const &p) {
  return std::hypot(p[0], p[1]) > 0.5 && !(p[1] < 0 && std::abs(p[0]) < 0.1);
}
bool clamp_ok(point<3> const &p) {
  return std::abs(p[0] - p[1]) > 0.05 && std::abs(p[0] - p[2]) > 0.05;
}

// clang-format off
auto const unary_cases = std::make_tuple(
    fn1("exp",      -5,    5,  [](auto x) { return dc::exp(x); }, nullptr, poly),
    fn1("expm1",    -3,    3,  [](auto x) { return dc::expm1(x); }, nullptr, poly),
    fn1("exp2",     -5,    5,  [](auto x) { return dc::exp2(x); }),
    fn1("log",      0.05,  20, [](auto x) { return dc::log(x); }, nullptr, poly),
    fn1("log1p",    -0.95, 20, [](auto x) { return dc::log1p(x); }, nullptr, poly),
    fn1("log2",     0.05,  20, [](auto x) { return dc::log2(x); }),
    fn1("log10",    0.05,  20, [](auto x) { return dc::log10(x); }),
    fn1("sqrt",     0.05,  20, [](auto x) { return dc::sqrt(x); }),
    fn1("rsqrt",    0.05,  20, [](auto x) { return dc::rsqrt(x); }),
    fn1("cbrt",     -20,   20, [](auto x) { return dc::cbrt(x); }, not_near_0),
    fn1("pow(x,3)",    -3, 3,  [](auto x) { return dc::pow(x, 3); }),
    fn1("pow(x,-2)",   -3, 3,  [](auto x) { return dc::pow(x, -2); }, not_near_0),
    fn1("pow(x,0)",    -3, 3,  [](auto x) { return dc::pow(x, 0); }),
    fn1("pow(x,2.5)",  0.05, 5, [](auto x) { return dc::pow(x, k(x, 2.5)); }),
    fn1("pow(x,-1.5)", 0.05, 5, [](auto x) { return dc::pow(x, k(x, -1.5)); }),
    fn1("pow(x,3.0)",  -3, 3,  [](auto x) { return dc::pow(x, k(x, 3.0)); }),
    fn1("pow(2,x)",    -4, 4,  [](auto x) { return dc::pow(k(x, 2.0), x); }),
    fn1("pow(0.3,x)",  -4, 4,  [](auto x) { return dc::pow(k(x, 0.3), x); }),
    fn1("pow(0,x)",    0.05, 3, [](auto x) { return dc::pow(k(x, 0.0), x); }),
    fn1("sin",      -10,   10, [](auto x) { return dc::sin(x); }),
    fn1("cos",      -10,   10, [](auto x) { return dc::cos(x); }),
    fn1("tan",      -1.4,  1.4, [](auto x) { return dc::tan(x); }),
    fn1("asin",     -0.95, 0.95, [](auto x) { return dc::asin(x); }),
    fn1("acos",     -0.95, 0.95, [](auto x) { return dc::acos(x); }),
    fn1("atan",     -10,   10, [](auto x) { return dc::atan(x); }),
    fn1("sinh",     -5,    5,  [](auto x) { return dc::sinh(x); }),
    fn1("cosh",     -5,    5,  [](auto x) { return dc::cosh(x); }),
    fn1("tanh",     -4,    4,  [](auto x) { return dc::tanh(x); }, nullptr, poly_tanh),
    fn1("asinh",    -10,   10, [](auto x) { return dc::asinh(x); }),
    fn1("acosh",    1.05,  20, [](auto x) { return dc::acosh(x); }),
    fn1("atanh",    -0.95, 0.95, [](auto x) { return dc::atanh(x); }),
    fn1("erf",      -3,    3,  [](auto x) { return dc::erf(x); }),
    fn1("erfc",     -3,    3,  [](auto x) { return dc::erfc(x); }),
    fn1("normcdf",  -5,    5,  [](auto x) { return dc::normcdf(x); }),
    fn1("abs",      -5,    5,  [](auto x) { return dc::abs(x); }, not_near_0),
    fn1("relu",     -5,    5,  [](auto x) { return dc::relu(x); }, not_near_0),
    fn1("floor",    -5,    5,  [](auto x) { return dc::floor(x); }, not_near_int),
    fn1("ceil",     -5,    5,  [](auto x) { return dc::ceil(x); }, not_near_int),
    fn1("round",    -5,    5,  [](auto x) { return dc::round(x); }, not_near_half),
    fn1("sigmoid",  -10,   10, [](auto x) { return dc::sigmoid(x); }, nullptr, poly_sigmoid),
    fn1("softplus", -10,   10, [](auto x) { return dc::softplus(x); }, nullptr, poly),
    fn1("where(x>1,x*x,sin x)", -3, 3, [](auto x) { return dc::where(x > 1, x * x, dc::sin(x)); }, not_near_1),
    fn1("select(x<0,0.5,x^3)",  -3, 3, [](auto x) { return dc::select(x < 0, k(x, 0.5), x * x * x); }, not_near_0));

auto const nary_cases = std::make_tuple(
    fn2("pow",   {0.1, -3}, {5, 3}, [](auto x, auto y) { return dc::pow(x, y); }),
    fn2("atan2", {-5, -5},  {5, 5}, [](auto y, auto x) { return dc::atan2(y, x); }, atan2_ok),
    fn2("hypot", {-5, -5},  {5, 5}, [](auto x, auto y) { return dc::hypot(x, y); }, hypot_ok),
    fn2("min",   {-5, -5},  {5, 5}, [](auto x, auto y) { return dc::min(x, y); }, untied),
    fn2("max",   {-5, -5},  {5, 5}, [](auto x, auto y) { return dc::max(x, y); }, untied),
    fn3("clamp", {-5, -3, 0.5}, {5, 0, 3}, [](auto x, auto lo, auto hi) { return dc::clamp(x, lo, hi); }, clamp_ok),
    fn3("fma",   {-5, -5, -5},  {5, 5, 5}, [](auto a, auto b, auto c) { return dc::fma(a, b, c); }));
// clang-format on

template <class Tuple, class G> void for_each_case(Tuple const &t, G &&g) {
  std::apply([&](auto const &...c) { (g(c), ...); }, t);
}

// ============================================================================================
// Helpers
// ============================================================================================
unsigned seed_of(char const *s) { // FNV-1a: each case has its own reproducible stream
  unsigned h = 2166136261u;
  for (; *s; ++s)
    h = (h ^ static_cast<unsigned char>(*s)) * 16777619u;
  return h;
}

// `n` samples of case c; with `as_float`, every coordinate is a float (so that float duals and
// the double reference see the same point).
template <int K, class F>
std::vector<point<K>> samples(fn_case<K, F> const &c, int n, unsigned salt = 0,
                              bool as_float = false) {
  std::mt19937 rng(seed_of(c.name) + salt);
  std::vector<point<K>> out;
  while (static_cast<int>(out.size()) < n) {
    point<K> p;
    for (int i = 0; i < K; ++i) {
      p[i] = std::uniform_real_distribution<double>(c.lo[i], c.hi[i])(rng);
      if (as_float)
        p[i] = static_cast<float>(p[i]);
    }
    if (!c.ok || c.ok(p))
      out.push_back(p);
  }
  return out;
}

std::string show(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}
template <int K> std::string show(point<K> const &p) {
  std::string s = "(";
  for (int i = 0; i < K; ++i)
    s += (i ? ", " : "") + show(p[i]);
  return s + ")";
}

struct tol {
  double rel, abs;
};
bool near(double a, double e, tol t) {
  if (a == e || (std::isnan(a) && std::isnan(e)))
    return true;
  return std::abs(a - e) <= t.rel * std::abs(e) + t.abs;
}

// Each case is checked in a function of its own ([[gnu::noinline]] on the check templates): one
// huge function with every case inlined takes the optimizer minutes.
//
// Every check of this file goes through EXPECT: doctest's machinery sits in two non-template
// functions (compile time stays low with hundreds of instantiations), and the message is built
// only on failure.
void passed() { CHECK(true); }
void failed(char const *file, int line, std::string const &msg) {
  ADD_FAIL_CHECK_AT(file, line, msg);
}
template <class... A> std::string cat(A const &...a) {
  std::ostringstream s;
  s.precision(17);
  (s << ... << a);
  return s.str();
}
#define EXPECT(cond, ...)                                                                          \
  ((cond) ? passed() : failed(__FILE__, __LINE__, cat(#cond, ": ", __VA_ARGS__)))
#define EXPECT_NEAR(a, e, t, ...)                                                                  \
  do {                                                                                             \
    double a_ = static_cast<double>(a), e_ = static_cast<double>(e);                               \
    EXPECT(near(a_, e_, t), __VA_ARGS__, ": got ", a_, ", expected ", e_, " (diff ",               \
           std::abs(a_ - e_), ")");                                                                \
  } while (0)

// Five-point central difference of g at x (error O(h^4)).
template <class G> double central_difference(G const &g, double x, double h) {
  return (g(x - 2 * h) - 8 * g(x - h) + 8 * g(x + h) - g(x + 2 * h)) / (12 * h);
}
double fd_step(double x) { return 1e-3 * std::max(1.0, std::abs(x)); }
// Rounding noise of the difference quotient for a function of magnitude `scale`.
double fd_noise(double scale, double h) {
  return 64 * std::numeric_limits<double>::epsilon() * scale / h;
}

// Partial i of f (on doubles) at p, by central differences.
template <int K, class F>
double fd_partial(F const &f, point<K> p, int i, double *noise = nullptr) {
  double x = p[i], h = fd_step(x);
  auto g = [&](double t) {
    p[i] = t;
    return static_cast<double>(std::apply(f, p));
  };
  if (noise)
    *noise = fd_noise(std::abs(g(x)) + std::abs(g(x + 2 * h)) + std::abs(g(x - 2 * h)), h);
  return central_difference(g, x, h);
}

// f applied to K arguments: argument i is D::variable(p[i], i) where bit i of Mask is set, and
// the plain value p[i] (of D's value type) otherwise.
template <bool Active, class D> auto make_arg(double v, int i) {
  using T = typename D::value_type;
  if constexpr (Active)
    return D::variable(T(v), i);
  else
    return T(v);
}
template <unsigned Mask, class D, int K, class F> auto call_mixed(F const &f, point<K> const &p) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return f(make_arg<((Mask >> I) & 1u) != 0, D>(p[I], static_cast<int>(I))...);
  }
  (std::make_index_sequence<K>{});
}
// All arguments dual, seeded with the unit vectors.
template <class D, int K, class F> auto call_seeded(F const &f, point<K> const &p) {
  return call_mixed<(1u << K) - 1, D, K>(f, p);
}
// Nested: argument i is seeded in direction i at both levels.
template <int K, class F> auto call_nested(F const &f, point<K> const &p) {
  using D = dual<double, K>;
  using DD = dual<D, K>;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return f(DD::variable(D::variable(p[I], static_cast<int>(I)), static_cast<int>(I))...);
  }
  (std::make_index_sequence<K>{});
}

template <class T> tol value_tol() {
  if constexpr (std::is_same_v<T, double>)
    return {1e-14, 1e-300};
  else
    return {1e-6, 1e-30};
}
// Derivative tolerance: relative, plus the noise of the difference quotient; for float also an
// absolute floor of a few float epsilons times the function's magnitude (derivatives such as
// 1 - tanh^2 or s (1 - s) are computed from a rounded value).
template <class T> tol deriv_tol(double fscale, double noise) {
  if constexpr (std::is_same_v<T, double>)
    return {1e-6, noise};
  else
    return {1e-5, noise + 4 * std::numeric_limits<float>::epsilon() * std::max(1.0, fscale)};
}

// ============================================================================================
// First derivatives against finite differences, every dual / plain argument combination
// ============================================================================================
template <class T, unsigned Mask, int K, class F>
[[gnu::noinline]] void check_form(fn_case<K, F> const &c, point<K> const &p, double fval,
                                  point<K> const &grad, point<K> const &noise) {
  using D = dual<T, K>;
  auto r = call_mixed<Mask, D, K>(c.f, p);
  static_assert(std::is_same_v<decltype(r), D>, "a math function on duals returns the dual type");
  EXPECT_NEAR(double(r.val), fval, value_tol<T>(), c.name, " value at ", show<K>(p), " mask ",
              Mask);
  for (int i = 0; i < K; ++i) {
    if ((Mask >> i) & 1u) {
      EXPECT_NEAR(double(r.d[i]), grad[i], deriv_tol<T>(std::abs(fval), noise[i]), c.name, " d/dx",
                  i, " at ", show<K>(p), " mask ", Mask);
    } else {
      EXPECT(r.d[i] == T(0), c.name, ": a plain argument has zero partial, mask ", Mask);
    }
  }
}

template <class T, int K, class F>
[[gnu::noinline]] void check_first_derivatives(fn_case<K, F> const &c) {
  constexpr bool is_float = std::is_same_v<T, float>;
  for (point<K> const &p : samples(c, 50, is_float ? 1 : 0, is_float)) {
    double fval = std::apply(c.f, p);
    point<K> grad, noise;
    for (int i = 0; i < K; ++i)
      grad[i] = fd_partial<K>(c.f, p, i, &noise[i]);
    [&]<unsigned... M>(std::integer_sequence<unsigned, M...>) {
      (check_form<T, M + 1, K>(c, p, fval, grad, noise), ...); // masks 1 .. 2^K - 1
    }
    (std::make_integer_sequence<unsigned, (1u << K) - 1>{});
  }
}

TEST_CASE_TEMPLATE("dual math: first derivatives match finite differences", T, double, float) {
  for_each_case(unary_cases, [](auto const &c) { check_first_derivatives<T>(c); });
  for_each_case(nary_cases, [](auto const &c) { check_first_derivatives<T>(c); });
}

// ============================================================================================
// Second derivatives: nested duals against finite differences of the first derivative
// ============================================================================================
template <int K, class F> [[gnu::noinline]] void check_second_derivatives(fn_case<K, F> const &c) {
  for (point<K> const &p : samples(c, 50, 2)) {
    auto r = call_nested<K>(c.f, p);
    static_assert(std::is_same_v<decltype(r), dual<dual<double, K>, K>>);
    auto first = call_seeded<dual<double, K>, K>(c.f, p);
    EXPECT_NEAR(r.val.val, double(std::apply(c.f, p)), (tol{1e-14, 0}), c.name, " nested value at ",
                show<K>(p));
    // Both levels carry the first derivative (up to rounding: 1 - tanh^2 may be contracted to an
    // fma in one and not the other, so the floor is relative to the value's magnitude).
    tol const same_rounding{1e-13,
                            4 * std::numeric_limits<double>::epsilon() * std::abs(r.val.val)};
    for (int i = 0; i < K; ++i) {
      EXPECT_NEAR(r.val.d[i], first.d[i], same_rounding, c.name, " inner first partial ", i);
      EXPECT_NEAR(r.d[i].val, first.d[i], same_rounding, c.name, " outer first partial ", i);
      for (int j = 0; j < K; ++j) {
        point<K> q = p;
        double h = fd_step(p[j]);
        auto g = [&](double t) {
          q[j] = t;
          return call_seeded<dual<double, K>, K>(c.f, q).d[i];
        };
        double scale = std::abs(g(p[j])) + std::abs(g(p[j] + 2 * h)) + std::abs(g(p[j] - 2 * h));
        double fd = central_difference(g, p[j], h);
        EXPECT_NEAR(r.d[i].d[j], fd, (tol{1e-5, fd_noise(scale, h)}), c.name, " d2/dx", i, "dx", j,
                    " at ", show<K>(p));
        EXPECT_NEAR(r.d[i].d[j], r.d[j].d[i], (tol{1e-12, 1e-300}), c.name,
                    " symmetry of the Hessian");
      }
    }
  }
}

TEST_CASE("dual math: nested duals give second derivatives matching finite differences") {
  for_each_case(unary_cases, [](auto const &c) { check_second_derivatives(c); });
  for_each_case(nary_cases, [](auto const &c) { check_second_derivatives(c); });
}

// ============================================================================================
// Conventions at non-differentiable points (the header's documented choices), on scalars and on
// SIMD batches (every lane)
// ============================================================================================
template <class T> constexpr int lanes_of = 1;
template <class T> double lane(T const &x, int) { return static_cast<double>(x); }
#if DUALCAST_HAS_SIMD
template <class U, int W> constexpr int lanes_of<dc::batch<U, W>> = W;
template <class U, int W> double lane(dc::batch<U, W> const &x, int l) {
  return static_cast<double>(x[l]);
}
#endif
// Every lane of x is e (with the sign of zero), or NaN.
bool is(double a, double e) { return a == e && std::signbit(a) == std::signbit(e); }
template <class T> bool lanes_are(T const &x, double e) {
  for (int l = 0; l < lanes_of<T>; ++l)
    if (!is(lane(x, l), e))
      return false;
  return true;
}
template <class T> bool lanes_nan(T const &x) {
  for (int l = 0; l < lanes_of<T>; ++l)
    if (!std::isnan(lane(x, l)))
      return false;
  return true;
}
#define CHECK_LANES(x, e)                                                                          \
  EXPECT(lanes_are((x), (e)), "expected ", (e), ", lane 0 is ", lane((x), 0))
#define CHECK_LANES_NAN(x) EXPECT(lanes_nan(x), "expected NaN, lane 0 is ", lane((x), 0))

#if DUALCAST_HAS_SIMD
#define DC_VALUE_TYPES                                                                             \
  float, double, dc::batch<float, dc::native_width<float>>,                                        \
      dc::batch<double, dc::native_width<double>>
#else
#define DC_VALUE_TYPES float, double
#endif

TEST_CASE_TEMPLATE("dual math: conventions at non-differentiable points", T, DC_VALUE_TYPES) {
  using D1 = dual<T, 1>;
  using D2 = dual<T, 2>;
  using D3 = dual<T, 3>;
  double const inf = std::numeric_limits<double>::infinity();
  auto x0 = [](double v) { return D1::variable(T(v), 0); };

  SUBCASE("abs'(0) = 0, also at -0, and abs(-0) = +0") {
    CHECK_LANES(dc::abs(x0(0.0)).d[0], 0.0);
    CHECK_LANES(dc::abs(x0(-0.0)).d[0], 0.0);
    CHECK_LANES(dc::abs(x0(-0.0)).val, 0.0);
    CHECK_LANES(dc::abs(x0(-2.0)).d[0], -1.0);
    CHECK_LANES(dc::abs(x0(2.0)).d[0], 1.0);
  }
  SUBCASE("relu'(0) = 0") {
    CHECK_LANES(dc::relu(x0(0.0)).d[0], 0.0);
    CHECK_LANES(dc::relu(x0(0.0)).val, 0.0);
    CHECK_LANES(dc::relu(x0(1e-30)).d[0], 1.0);
    CHECK_LANES(dc::relu(x0(-1e-30)).d[0], 0.0);
  }
  SUBCASE("sqrt'(0) = cbrt'(0) = +inf") {
    CHECK_LANES(dc::sqrt(x0(0.0)).d[0], inf);
    CHECK_LANES(dc::sqrt(x0(0.0)).val, 0.0);
    CHECK_LANES(dc::cbrt(x0(0.0)).d[0], inf);
    CHECK_LANES(dc::cbrt(x0(0.0)).val, 0.0);
  }
  SUBCASE("rsqrt(0) = +inf, rsqrt'(0) = -inf; rsqrt is 1 / sqrt, bit for bit") {
    CHECK_LANES(dc::rsqrt(x0(0.0)).val, inf);
    CHECK_LANES(dc::rsqrt(x0(0.0)).d[0], -inf);
    for (double v : {0.3, 2.0, 7.5, 1e-300, 1e300})
      CHECK_LANES(dc::rsqrt(x0(v)).val, (lane(T(1) / dc::sqrt(T(v)), 0)));
  }
  SUBCASE("min / max at a tie give half the derivative to each argument") {
    D2 a = D2::variable(T(2), 0), b = D2::variable(T(2), 1);
    for (D2 r : {dc::max(a, b), dc::min(a, b)}) {
      CHECK_LANES(r.val, 2.0);
      CHECK_LANES(r.d[0], 0.5);
      CHECK_LANES(r.d[1], 0.5);
    }
    CHECK_LANES(dc::max(a, T(2)).d[0], 0.5); // against a constant: half of x's derivative
    CHECK_LANES(dc::min(T(2), b).d[1], 0.5);
    CHECK_LANES(dc::max(a, T(1)).d[0], 1.0); // no tie: all of it
    CHECK_LANES(dc::min(a, T(1)).d[0], 0.0);
  }
  SUBCASE("clamp passes the derivative of x on [lo, hi] inclusive, of lo / hi beyond") {
    D3 lo = D3::variable(T(-1), 1), hi = D3::variable(T(1), 2);
    auto expect = [&](double x, double v, double dx, double dlo, double dhi) {
      D3 r = dc::clamp(D3::variable(T(x), 0), lo, hi);
      CHECK_LANES(r.val, v);
      CHECK_LANES(r.d[0], dx);
      CHECK_LANES(r.d[1], dlo);
      CHECK_LANES(r.d[2], dhi);
    };
    expect(-1.0, -1.0, 1, 0, 0); // x == lo: x's derivative
    expect(1.0, 1.0, 1, 0, 0);   // x == hi: x's derivative
    expect(0.25, 0.25, 1, 0, 0);
    expect(-1.5, -1.0, 0, 1, 0);
    expect(3.0, 1.0, 0, 0, 1);
    // With plain bounds.
    CHECK_LANES(dc::clamp(x0(1.0), T(-1), T(1)).d[0], 1.0);
    CHECK_LANES(dc::clamp(x0(1.5), T(-1), T(1)).d[0], 0.0);
  }
  SUBCASE("pow: d/dx = 0 where y == 0; d/dy = 0 where x == 0 and y >= 0") {
    // With both arguments dual, the other argument's partial may not be finite (log(x < 0) =
    // NaN, y 0^(y-1) = inf for 0 < y < 1): its zero tangent wins (see the negative-base case).
    for (double x : {0.0, 2.0}) {
      D2 r = dc::pow(D2::variable(T(x), 0), D2::variable(T(0), 1));
      CHECK_LANES(r.val, 1.0);
      CHECK_LANES(r.d[0], 0.0);
    }
    for (double y : {0.0, 2.0}) {
      D2 r = dc::pow(D2::variable(T(0), 0), D2::variable(T(y), 1));
      CHECK_LANES(r.d[1], 0.0);
      CHECK_LANES(r.val, y == 0 ? 1.0 : 0.0);
    }
    for (double x : {0.0, 2.0, -3.0}) {
      CHECK_LANES(dc::pow(x0(x), T(0)).d[0], 0.0); // dual ^ constant 0
      CHECK_LANES(dc::pow(x0(x), 0).d[0], 0.0);    // dual ^ int 0
      CHECK_LANES(dc::pow(x0(x), 0).val, 1.0);
    }
    for (double y : {0.0, 0.5, 2.0}) {
      CHECK_LANES(dc::pow(T(0), x0(y)).d[0], 0.0); // constant 0 ^ dual
      CHECK_LANES(dc::pow(T(0), x0(y)).val, y == 0 ? 1.0 : 0.0);
    }
    // At x == 0 the x-partial is the ordinary y x^(y-1).
    CHECK_LANES(dc::pow(D2::variable(T(0), 0), D2::variable(T(1), 1)).d[0], 1.0);
    CHECK_LANES(dc::pow(D2::variable(T(0), 0), D2::variable(T(2), 1)).d[0], 0.0);
    CHECK_LANES(dc::pow(D2::variable(T(0), 0), D2::variable(T(0.5), 1)).d[0], inf);
  }
  SUBCASE("pow at a negative base: d/dy is NaN, d/dx is y x^(y-1); a zero tangent wins") {
    // x^y with x < 0 is real only at integer y, where it is not differentiable in y (PyTorch and
    // JAX: p log x = NaN); in x it is, wherever x^(y-1) is finite.
    for (double y : {-1.0, 0.0, 2.0, 3.0}) {
      D2 r = dc::pow(D2::variable(T(-2), 0), D2::variable(T(y), 1));
      CHECK_LANES(r.val, std::pow(-2.0, y));
      CHECK_LANES(r.d[0], y == 0 ? 0.0 : y * std::pow(-2.0, y - 1));
      CHECK_LANES_NAN(r.d[1]);
      CHECK_LANES_NAN(dc::pow(T(-2), x0(y)).d[0]); // constant base
      // A constant exponent (zero tangent) or a dual one: the NaN partial does not reach x's.
      D2 c = dc::pow(D2::variable(T(-2), 0), D2(T(y)));
      CHECK_LANES(c.d[0], y == 0 ? 0.0 : y * std::pow(-2.0, y - 1));
      CHECK_LANES(c.d[1], 0.0);
      CHECK_LANES(dc::pow(x0(-2.0), T(y)).d[0], y == 0 ? 0.0 : y * std::pow(-2.0, y - 1));
    }
    // Off the integers the value itself is NaN, and so are both partials.
    D2 r = dc::pow(D2::variable(T(-2), 0), D2::variable(T(0.5), 1));
    CHECK_LANES_NAN(r.val);
    CHECK_LANES_NAN(r.d[0]);
    CHECK_LANES_NAN(r.d[1]);
  }
  SUBCASE("hypot'(0, 0) = 0") {
    D2 r = dc::hypot(D2::variable(T(0), 0), D2::variable(T(0), 1));
    CHECK_LANES(r.val, 0.0);
    CHECK_LANES(r.d[0], 0.0);
    CHECK_LANES(r.d[1], 0.0);
    CHECK_LANES(dc::hypot(x0(0.0), T(0)).d[0], 0.0);
    CHECK_LANES(dc::hypot(T(0), x0(0.0)).d[0], 0.0);
  }
  SUBCASE("floor, ceil and round have zero derivative, also at their jumps") {
    for (double x : {-2.0, -1.5, 0.0, 0.5, 2.5, 3.0, 0.7}) {
      CHECK_LANES(dc::floor(x0(x)).d[0], 0.0);
      CHECK_LANES(dc::ceil(x0(x)).d[0], 0.0);
      CHECK_LANES(dc::round(x0(x)).d[0], 0.0);
      CHECK_LANES(dc::floor(x0(x)).val, std::floor(x));
      CHECK_LANES(dc::ceil(x0(x)).val, std::ceil(x));
      CHECK_LANES(dc::round(x0(x)).val, std::nearbyint(x)); // ties to even
    }
  }
}

// ============================================================================================
// Edge behaviour: overflow, underflow, logs of 0 and negatives, saturating activations, NaN
// ============================================================================================
TEST_CASE_TEMPLATE("dual math: edge behaviour", T, DC_VALUE_TYPES) {
  using D1 = dual<T, 1>;
  double const inf = std::numeric_limits<double>::infinity();
  auto x0 = [](double v) { return D1::variable(T(v), 0); };
  constexpr bool single = std::is_same_v<dc::scalar_of_t<T>, float> ||
#if DUALCAST_HAS_SIMD
                          std::is_same_v<T, dc::batch<float, dc::native_width<float>>>;
#else
                          false;
#endif

  SUBCASE("exp overflows to +inf and underflows to +0") {
    CHECK_LANES(dc::exp(T(1000)), inf);
    CHECK_LANES(dc::exp(T(-1000)), 0.0);
    CHECK_LANES(dc::exp(T(-inf)), 0.0);
    CHECK_LANES(dc::exp(T(inf)), inf);
    CHECK_LANES(dc::expm1(T(1000)), inf);
    CHECK_LANES(dc::expm1(T(-1000)), -1.0);
    CHECK_LANES(dc::exp(x0(1000)).d[0], inf);
    CHECK_LANES(dc::exp(x0(-1000)).val, 0.0);
    CHECK_LANES(dc::exp(x0(-1000)).d[0], 0.0);
    // Just below overflow the result is finite and huge.
    double const big = single ? 88.0 : 709.0;
    for (int l = 0; l < lanes_of<T>; ++l)
      EXPECT_NEAR(lane(dc::exp(T(big)), l), std::exp(big), (tol{1e-6, 0}), "exp near overflow");
  }
  SUBCASE("log(0) = -inf, log(negative) = NaN, log(+inf) = +inf") {
    CHECK_LANES(dc::log(T(0)), -inf);
    CHECK_LANES(dc::log(T(-0.0)), -inf);
    CHECK_LANES_NAN(dc::log(T(-1)));
    CHECK_LANES_NAN(dc::log(T(-inf)));
    CHECK_LANES(dc::log(T(inf)), inf);
    CHECK_LANES(dc::log1p(T(-1)), -inf);
    CHECK_LANES_NAN(dc::log1p(T(-2)));
    CHECK_LANES(dc::log(x0(0)).val, -inf);
    CHECK_LANES(dc::log(x0(0)).d[0], inf);
    CHECK_LANES_NAN(dc::log(x0(-1)).val);
  }
  SUBCASE("sigmoid and softplus saturate without overflow") {
    // Reference values in double: sigmoid(-x) = exp(-x) / (1 + exp(-x)) for x > 0.
    double const float_min = std::numeric_limits<float>::min();
    for (double x : {100.0, -100.0, 1e4, -1e4}) {
      double s_ref = x > 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
      double sp_ref = x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
      // sigmoid' = e / (1 + e)^2, e = exp(-|x|) (s (1 - s) is 0 at x = 100: 1 - s cancels)
      double const e = std::exp(-std::abs(x)), ds_ref = e / ((1 + e) * (1 + e));
      // float: results below the smallest normal float may flush; double: relative accuracy.
      tol t = single ? tol{1e-6, float_min} : tol{1e-14, 1e-300};
      auto s = dc::sigmoid(x0(x));
      auto sp = dc::softplus(x0(x));
      for (int l = 0; l < lanes_of<T>; ++l) {
        EXPECT_NEAR(lane(s.val, l), s_ref, t, "sigmoid(", x, ")");
        EXPECT_NEAR(lane(s.d[0], l), ds_ref, t, "sigmoid'(", x, ")");
        EXPECT_NEAR(lane(sp.val, l), sp_ref, t, "softplus(", x, ")");
        EXPECT_NEAR(lane(sp.d[0], l), s_ref, t, "softplus'(", x, ")");
        EXPECT_NEAR(lane(dc::sigmoid(T(x)), l), s_ref, t, "plain sigmoid(", x, ")");
        EXPECT_NEAR(lane(dc::softplus(T(x)), l), sp_ref, t, "plain softplus(", x, ")");
        EXPECT(std::isfinite(lane(s.d[0], l)), "sigmoid'(", x, ")");
        EXPECT(std::isfinite(lane(sp.d[0], l)), "softplus'(", x, ")");
      }
    }
  }
  SUBCASE("tanh's derivative keeps its relative accuracy where tanh saturates") {
    // tanh'(x) = 4 e / (1 + e)^2, e = exp(-2 |x|), in long double; 1 - tanh^2 from the rounded
    // tanh is off by far more (a float's 1 - t^2 is 0 from |x| = 9 on, where the slope is 6e-8).
    double const float_min = std::numeric_limits<float>::min();
    for (double x : {0.001, 0.3, -0.7, 2.0, -5.0, 7.5, -8.5, 9.5, -12.0, 20.0, -40.0}) {
      long double const e = std::exp(-2.0L * std::abs(x)), ref = 4 * e / ((1 + e) * (1 + e));
      tol const t = single ? tol{2e-6, float_min} : tol{1e-14, 1e-300};
      auto const y = dc::tanh(x0(x));
      for (int l = 0; l < lanes_of<T>; ++l)
        EXPECT_NEAR(lane(y.d[0], l), double(ref), t, "tanh'(", x, ")");
    }
  }
  SUBCASE("NaN propagates through min, max, clamp and relu (either side)") {
    T nan(std::numeric_limits<double>::quiet_NaN());
    CHECK_LANES_NAN(dc::min(nan, T(1)));
    CHECK_LANES_NAN(dc::min(T(1), nan));
    CHECK_LANES_NAN(dc::max(nan, T(1)));
    CHECK_LANES_NAN(dc::max(T(1), nan));
    CHECK_LANES_NAN(dc::clamp(nan, T(0), T(1)));
    CHECK_LANES_NAN(dc::relu(nan));
    CHECK_LANES_NAN(dc::min(D1(nan), x0(1)).val);
    CHECK_LANES_NAN(dc::min(x0(1), D1(nan)).val);
    CHECK_LANES_NAN(dc::max(D1(nan), x0(1)).val);
    CHECK_LANES_NAN(dc::max(x0(1), D1(nan)).val);
    CHECK_LANES_NAN(dc::max(x0(1), nan).val);
    CHECK_LANES_NAN(dc::clamp(D1(nan), T(0), T(1)).val);
    CHECK_LANES_NAN(dc::relu(D1(nan)).val);
  }
}

TEST_CASE("dual math: constants of other arithmetic types mix with duals") {
  using F1 = dual<float, 1>;
  using D1 = dual<double, 1>;
  F1 xf = F1::variable(1.5f, 0);
  D1 xd = D1::variable(-0.5, 0);
  auto pf = dc::pow(xf, 2.5); // double exponent on a float dual
  CHECK(pf.val == doctest::Approx(std::pow(1.5, 2.5)).epsilon(1e-6));
  CHECK(pf.d[0] == doctest::Approx(2.5 * std::pow(1.5, 1.5)).epsilon(1e-6));
  CHECK(dc::pow(2, xd).d[0] == doctest::Approx(std::pow(2.0, -0.5) * std::log(2.0))); // int base
  CHECK(dc::pow(xd, 2).d[0] == doctest::Approx(-1.0)); // int exponent
  CHECK(dc::max(xd, 0).val == 0.0);                    // int
  CHECK(dc::max(xd, 0).d[0] == 0.0);
  CHECK(dc::min(xd, 0).d[0] == 1.0);
  CHECK(dc::clamp(xd, -1, 1.0f).d[0] == 1.0);
  CHECK(dc::atan2(1, xd).d[0] == doctest::Approx(-1.0 / 1.25)); // d/dx atan2(1, x) = -1 / (1 + x^2)
  CHECK(dc::hypot(xf, 2.0).d[0] == doctest::Approx(1.5 / 2.5));
  CHECK(dc::fma(2, xd, 1.5f).val == 0.5);
  CHECK(dc::fma(2, xd, 1.5f).d[0] == 2.0);
  CHECK(dc::fma(xd, xd, 1).d[0] == -1.0);
  CHECK(dc::select(true, xd, 3).d[0] == 1.0);
  CHECK(dc::where(false, xd, 3).val == 3.0);
  static_assert(std::is_same_v<decltype(dc::pow(xf, 2.5)), F1>);
  static_assert(std::is_same_v<decltype(dc::max(0, xd)), D1>);
  static_assert(std::is_same_v<decltype(dc::fma(1, 2.0f, xd)), D1>);
}

// A floating exponent of another type is not silently truncated by the integer-power overloads:
// pow(float, double) is computed in double.
template <class X, class Y>
concept can_pow = requires(X x, Y y) {
  dc::pow(x, y);
};
static_assert(can_pow<float, int> && can_pow<double, int> && can_pow<double, long>);
static_assert(std::is_same_v<decltype(dc::pow(1.5f, 2.5)), double>);
static_assert(can_pow<dual<float, 1>, double> && can_pow<dual<float, 1>, int>);
#if DUALCAST_HAS_SIMD
static_assert(can_pow<dc::batch<float, 4>, int> && can_pow<dc::batch<float, 4>, double>);
#endif

// ============================================================================================
// SIMD batches
// ============================================================================================
#if DUALCAST_HAS_SIMD

// Distance in units in the last place; +0 and -0 are 0 apart, NaN is equal to NaN only.
template <class T> std::uint64_t ulp_distance(T a, T b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b) ? 0 : ~std::uint64_t{0};
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  auto key = [](T x) {
    U u;
    std::memcpy(&u, &x, sizeof u);
    constexpr U sign = U(1) << (8 * sizeof(U) - 1);
    std::uint64_t mag = u & ~sign, half = std::uint64_t(1) << 63;
    return (u & sign) ? half - mag : half + mag;
  };
  std::uint64_t ka = key(a), kb = key(b);
  return ka > kb ? ka - kb : kb - ka;
}
bool same(double a, double b) {
  return (a == b && std::signbit(a) == std::signbit(b)) || (std::isnan(a) && std::isnan(b));
}

template <class T> constexpr int W = dc::native_width<T>;
template <class T> using batch_t = dc::batch<T, W<T>>;

constexpr double deriv_eps = 8; // duals of batches against scalar duals, see check_simd_duals

// Every function on batches equals the scalar function lane by lane.
template <class T, int K, class F>
[[gnu::noinline]] void check_simd_values(fn_case<K, F> const &c) {
  using B = batch_t<T>;
  auto pts = samples(c, 64 * W<T>, 3, std::is_same_v<T, float>);
  for (std::size_t s = 0; s < pts.size(); s += W<T>) {
    std::array<B, K> args{};
    for (int i = 0; i < K; ++i)
      for (int l = 0; l < W<T>; ++l)
        args[i].set(l, T(pts[s + l][i]));
    auto r = std::apply(c.f, args);
    static_assert(std::is_same_v<decltype(r), B>);
    for (int l = 0; l < W<T>; ++l) {
      std::array<T, K> xs;
      for (int i = 0; i < K; ++i)
        xs[i] = T(pts[s + l][i]);
      T ref = std::apply(c.f, xs);
      std::uint64_t const ulps = std::is_same_v<T, float> ? c.simd.float_ulps : c.simd.double_ulps;
      if (ulps > 0)
        EXPECT(ulp_distance(r[l], ref) <= ulps, c.name, " at ", show<K>(pts[s + l]), ": ", r[l],
               " vs ", ref);
      else
        EXPECT(same(r[l], ref), c.name, " at ", show<K>(pts[s + l]), ": ", r[l], " vs ", ref);
    }
  }
}

TEST_CASE_TEMPLATE("simd: every function on batches equals the scalar function lane by lane", T,
                   float, double) {
  for_each_case(unary_cases, [](auto const &c) { check_simd_values<T>(c); });
  for_each_case(nary_cases, [](auto const &c) { check_simd_values<T>(c); });
}

// Duals of batches with random tangents (two or three partials) equal the scalar duals lane by
// lane: values exactly (within the ulp bound for the float polynomials), and every partial
// within deriv_eps rounding errors of its magnitude. A partial is the sum over the arguments of
// df/dx_i * tangent_i (contracted to fma differently in vector and scalar code, and possibly
// cancelling), so its error is measured in epsilons of sum |df/dx_i| |tangent_i|; where the
// derivative is formed from the rounded value (1 - tanh^2, s (1 - s)), the magnitude of the value
// counts too.
template <class T, int K, class F>
[[gnu::noinline]] void check_simd_duals(fn_case<K, F> const &c, double &worst) {
  constexpr int N = K < 2 ? 2 : K;
  using B = batch_t<T>;
  using DB = dual<B, N>;
  using DS = dual<T, N>;
  std::mt19937 rng(seed_of(c.name) + 5);
  std::uniform_real_distribution<double> tangent(-1, 1);
  auto pts = samples(c, 16 * W<T>, 4, std::is_same_v<T, float>);
  for (std::size_t s = 0; s < pts.size(); s += W<T>) {
    std::array<DB, K> args{};
    std::array<std::array<DS, K>, W<T>> scalar_args{};
    for (int i = 0; i < K; ++i)
      for (int l = 0; l < W<T>; ++l) {
        T v = T(pts[s + l][i]);
        args[i].val.set(l, v);
        scalar_args[l][i].val = v;
        for (int j = 0; j < N; ++j) {
          T t = T(tangent(rng));
          args[i].d[j].set(l, t);
          scalar_args[l][i].d[j] = t;
        }
      }
    DB r = std::apply(c.f, args);
    std::uint64_t const value_ulps =
        std::is_same_v<T, float> ? c.simd.float_ulps : c.simd.double_ulps;
    for (int l = 0; l < W<T>; ++l) {
      DS ref = std::apply(c.f, scalar_args[l]);
      point<K> p;
      for (int i = 0; i < K; ++i)
        p[i] = double(T(pts[s + l][i]));
      auto grad = call_seeded<dual<T, K>, K>(c.f, p);
      EXPECT(ulp_distance(r.val[l], ref.val) <= value_ulps, c.name, " value at ", show<K>(p), ": ",
             r.val[l], " vs ", ref.val);
      for (int j = 0; j < N; ++j) {
        double scale = 0;
        for (int i = 0; i < K; ++i)
          scale += std::abs(double(scalar_args[l][i].d[j])) *
                   std::max(std::abs(double(grad.d[i])),
                            c.simd.deriv_from_value ? std::abs(double(ref.val)) : 0.0);
        double a = r.d[j][l], b = ref.d[j], err = std::abs(a - b);
        double units = a == b ? 0 : err / (std::numeric_limits<T>::epsilon() * scale);
        worst = std::max(worst, units);
        EXPECT(units <= deriv_eps, c.name, " partial ", j, " at ", show<K>(p), ": ", a, " vs ", b,
               " (", units, " eps of ", scale, ")");
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd: duals of batches equal scalar duals lane by lane", T, float, double) {
  double worst = 0;
  for_each_case(unary_cases, [&](auto const &c) { check_simd_duals<T>(c, worst); });
  for_each_case(nary_cases, [&](auto const &c) { check_simd_duals<T>(c, worst); });
  MESSAGE(std::string(sizeof(T) == 4 ? "dual<batch<float>>" : "dual<batch<double>>"),
          " partials: max error ", worst, " epsilons of their magnitude");
}

// The float polynomial approximations over the whole float range, against the C library.
template <class F> struct poly_case {
  char const *name;
  F f;
  std::uint64_t max_ulps;
};
template <class F> poly_case(char const *, F, std::uint64_t) -> poly_case<F>;

auto const poly_cases = std::make_tuple(
    poly_case{"exp", [](auto x) { return dc::exp(x); }, poly.float_ulps},
    poly_case{"expm1", [](auto x) { return dc::expm1(x); }, poly.float_ulps},
    poly_case{"log", [](auto x) { return dc::log(x); }, poly.float_ulps},
    poly_case{"log1p", [](auto x) { return dc::log1p(x); }, poly.float_ulps},
    poly_case{"tanh", [](auto x) { return dc::tanh(x); }, poly_tanh.float_ulps},
    poly_case{"sigmoid", [](auto x) { return dc::sigmoid(x); }, poly_sigmoid.float_ulps},
    poly_case{"softplus", [](auto x) { return dc::softplus(x); }, poly.float_ulps},
    // tanh under DUALCAST_PRECISE_TANH (Cephes' tanhf; measured: 1 ulp)
    poly_case{"tanh_precise",
              [](auto x) {
                if constexpr (std::is_same_v<decltype(x), float>)
                  return dc::tanh(x);
                else
                  return dc::detail::tanh_precise(x);
              },
              2});

// Inputs spread over every magnitude, after the given special values: random bit patterns (all
// exponents, subnormals, inf, NaN), uniform on [-1, 1], [-20, 20] and [-wide, wide], and
// log-uniform magnitudes 10^[emin, emax).
template <class T>
std::vector<T> wide_inputs(std::vector<T> v, int n, unsigned seed, T wide, T emin, T emax) {
  using engine = std::conditional_t<sizeof(T) == 4, std::mt19937, std::mt19937_64>;
  using bits_t = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  engine rng(seed);
  std::uniform_real_distribution<T> u1(-1, 1), u20(-20, 20), uw(-wide, wide), e(emin, emax);
  while (static_cast<int>(v.size()) < n) {
    switch (v.size() % 5) {
    case 0: {
      bits_t bits = rng();
      T f;
      std::memcpy(&f, &bits, sizeof f);
      v.push_back(f);
      break;
    }
    case 1:
      v.push_back(u1(rng));
      break;
    case 2:
      v.push_back(u20(rng));
      break;
    case 3:
      v.push_back(uw(rng));
      break;
    default:
      v.push_back((rng() & 1 ? T(1) : T(-1)) * std::pow(T(10), e(rng)));
      break;
    }
  }
  return v;
}

// Every case's batch version against its scalar version over xs: the largest distance in ulp
// within the case's bound; zeros, infinities and NaN exact, including the sign of zero.
template <class T, class Cases> void check_whole_range(Cases const &cases, std::vector<T> xs) {
  using B = batch_t<T>;
  xs.resize(xs.size() / W<T> * W<T>);
  for_each_case(cases, [&](auto const &c) {
    std::uint64_t worst = 0;
    T worst_x = 0;
    for (std::size_t s = 0; s < xs.size(); s += W<T>) {
      B r = c.f(B::load(&xs[s]));
      for (int l = 0; l < W<T>; ++l) {
        T x = xs[s + l], ref = c.f(x);
        std::uint64_t u = ulp_distance(r[l], ref);
        if (u > worst)
          worst = u, worst_x = x;
        if (ref == 0 || std::isinf(ref) || std::isnan(ref) || x == 0 || std::isinf(x))
          EXPECT(same(r[l], ref), c.name, "(", x, ") = ", r[l], ", C library ", ref);
      }
    }
    MESSAGE(std::string(c.name), ": max ", worst, " ulp over ", xs.size(),
            " inputs (at x = ", show(double(worst_x)), ")");
    EXPECT(worst <= c.max_ulps, c.name, ": ", worst, " ulp at ", worst_x);
  });
}

// The float inputs: the shared spread with float's specials and edges.
std::vector<float> wide_inputs(int n) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float fmax = std::numeric_limits<float>::max(),
                  fmin = std::numeric_limits<float>::min();
  constexpr float den = std::numeric_limits<float>::denorm_min();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          fmax,
                          -fmax,
                          fmin,
                          -fmin,
                          den,
                          -den,
                          1.0f,
                          -1.0f,
                          0.5f,
                          -0.5f,
                          9.0f,
                          -9.0f,
                          88.72283935546875f,
                          88.7228f,
                          88.72284f,
                          -87.33654f,
                          -103.97208f,
                          -103.972084f,
                          -104.0f,
                          89.0f,
                          -0.99999994f,
                          -1.0f + 1e-7f,
                          1e-8f,
                          -1e-8f,
                          3e38f,
                          1e-38f,
                          2e-39f};
  return wide_inputs(std::move(v), n, 2024, 110.0f, -45.0f, 38.5f);
}

TEST_CASE(
    "simd: float polynomials stay within a few ulp of the scalar functions over the whole range") {
  check_whole_range(poly_cases, wide_inputs(100000));
}

// The double approximations (exp, expm1, tanh, sigmoid) over every magnitude: random bit
// patterns, uniform on [-1, 1], [-20, 20] and [-750, 750], log-uniform magnitudes, and the edges
// of overflow, underflow and the approximations' intervals.
std::vector<double> wide_double_inputs(int n) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {
      0.0,     -0.0,   inf,    -inf,      std::numeric_limits<double>::quiet_NaN(),
      709.78,  709.79, 710.0,  -708.4,    -708.5,
      -745.13, -745.2, -746.0, 1e-300,    -1e-300,
      5e-324,  0.625,  -0.625, 0.5,       -0.5,
      19.0,    -19.0,  1e-20,  -1.0e-200, std::numeric_limits<double>::max()};
  return wide_inputs(std::move(v), n, 2026, 750.0, -320.0, 308.0);
}

TEST_CASE("simd: double approximations stay within a few ulp of the C library over the whole "
          "range") {
  auto const cases = std::make_tuple(
      poly_case{"exp", [](auto x) { return dc::exp(x); }, poly.double_ulps},
      poly_case{"expm1", [](auto x) { return dc::expm1(x); }, poly.double_ulps},
      poly_case{"tanh", [](auto x) { return dc::tanh(x); }, poly_tanh.double_ulps},
      poly_case{"sigmoid", [](auto x) { return dc::sigmoid(x); }, poly_sigmoid.double_ulps});
  check_whole_range(cases, wide_double_inputs(200000));
}

TEST_CASE("simd: select / where on batch masks pick per lane, for values and duals") {
  using B = batch_t<float>;
  using DB = dual<B, 2>;
  B x, y;
  for (int l = 0; l < W<float>; ++l)
    x.set(l, float(l) - 2.5f), y.set(l, 10.0f * float(l));
  DB dx = DB::variable(x, 0), dy = DB::variable(y, 1);
  DB r = dc::where(x > 0, dx * dx, dy);
  DB s = dc::select(x > 0, dx, 7.0f);
  for (int l = 0; l < W<float>; ++l) {
    bool pos = x[l] > 0;
    CHECK(r.val[l] == (pos ? x[l] * x[l] : y[l]));
    CHECK(r.d[0][l] == (pos ? 2 * x[l] : 0.0f));
    CHECK(r.d[1][l] == (pos ? 0.0f : 1.0f));
    CHECK(s.val[l] == (pos ? x[l] : 7.0f));
    CHECK(s.d[0][l] == (pos ? 1.0f : 0.0f));
    CHECK(s.d[1][l] == 0.0f);
  }
}

#endif // DUALCAST_HAS_SIMD

} // namespace

// normcdf through erfc: relative accuracy in the lower tail, where (1 + erf) / 2 cancels to 0.
// The bound grows as x^2: erfc's condition number at -x / sqrt 2 is about x^2, times the rounding
// of that argument (the reference, in long double, has almost none).
TEST_CASE("normcdf: values in both tails, and its derivative") {
  auto phi = [](double x) {
    return 0.5L * std::erfc(-static_cast<long double>(x) / std::sqrt(2.0L));
  };
  for (double x : {-37.5, -30.0, -20.0, -8.0, -3.0, -1.0, -1e-3, 0.0, 0.5, 2.0, 6.0, 9.0}) {
    INFO("x = " << x);
    long double const ref = phi(x);
    REQUIRE(ref > 0); // (so that the relative bounds below mean something)
    CHECK(std::abs(dc::normcdf(x) - ref) <= (1 + x * x) * 4.4e-16 * ref);
    if (x > -12) // (beyond, float's Phi is subnormal)
      CHECK(std::abs(dc::normcdf(float(x)) - ref) <= (1 + x * x) * 2.4e-7 * ref);
  }
  CHECK(dc::normcdf(-30.0) > 4.9e-198); // 4.906e-198, where (1 + erf) / 2 gives 0 below x ~ -8.3
  CHECK(dc::normcdf(0.0) == 0.5);
  CHECK(dc::normcdf(40.0) == 1.0);
  // The derivative, against central differences and the closed form exp(-x^2 / 2) / sqrt(2 pi).
  for (double x : {-6.0, -2.5, -0.3, 0.0, 1.0, 4.0}) {
    INFO("x = " << x);
    dual<double, 1> d(x);
    d.d[0] = 1;
    auto const y = dc::normcdf(d);
    double const h = 1e-5, fd = double((phi(x + h) - phi(x - h)) / (2 * h));
    CHECK(y.val == dc::normcdf(x));
    CHECK(std::abs(y.d[0] - fd) <= 1e-8 * fd);
    double const closed = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    CHECK(std::abs(y.d[0] - closed) <= 1e-15 * closed);
  }
}

TEST_CASE("pow with a floating exponent of another type keeps the fraction") {
  CHECK(dc::pow(1.5f, 2.5) == std::pow(1.5, 2.5));
#if DUALCAST_HAS_SIMD
  auto b = dc::pow(dc::batch<float, 4>(1.5f), 2.5);
  CHECK(b[0] == doctest::Approx(std::pow(1.5, 2.5)).epsilon(1e-6));
#endif
}
