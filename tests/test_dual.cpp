// Tests of dual<T, N> itself: layout, constexpr arithmetic, mixing with constants, comparisons,
// value_of, variable seeding, nesting and select / where. The math functions are tested in
// test_dual_math.cpp.
#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <initializer_list>
#include <limits>
#include <type_traits>

namespace dc = dualcast;
using dc::dual;

namespace {

using D1 = dual<double, 1>;
using D2 = dual<double, 2>;
using F2 = dual<float, 2>;
using DD = dual<dual<double, 1>, 1>; // second derivatives

// ---- layout -------------------------------------------------------------------------------------
static_assert(std::is_trivially_copyable_v<D1>);
static_assert(std::is_trivially_copyable_v<D2>);
static_assert(std::is_trivially_copyable_v<dual<float, 4>>);
static_assert(std::is_trivially_copyable_v<DD>);
static_assert(std::is_trivially_copyable_v<dual<dual<float, 2>, 3>>);
static_assert(std::is_standard_layout_v<D2>);
static_assert(sizeof(D2) == 3 * sizeof(double));
static_assert(sizeof(dual<float, 4>) == 5 * sizeof(float));
static_assert(sizeof(DD) == 4 * sizeof(double));
#if DUALCAST_HAS_SIMD
static_assert(std::is_trivially_copyable_v<dual<dc::batch<float, dc::native_width<float>>, 2>>);
#endif

static_assert(D2::size == 2);
static_assert(std::is_same_v<D2::value_type, double>);
static_assert(std::is_same_v<DD::value_type, D1>);
static_assert(dc::is_dual_v<D2> && dc::is_dual_v<D2 const &> && !dc::is_dual_v<double>);
static_assert(std::is_same_v<dc::scalar_of_t<dual<dual<float, 2>, 3>>, float>);
static_assert(std::is_same_v<dc::scalar_of_t<double>, double>);

// ---- constexpr arithmetic
// ------------------------------------------------------------------------ f(x, y) = (x y + 3 x - y
// / 2) / (x + 1); at (1, 4): f = 5 / 2, df/dx = ((y + 3)(x + 1) - 5) / 4 = 9 / 4, df/dy = (x - 1/2)
// / (x + 1) = 1 / 4. Every step is exact in binary floating point.
constexpr auto rational = [](auto x, auto y) { return (x * y + 3.0 * x - y / 2) / (x + 1); };
constexpr D2 rational_at_1_4 = rational(D2::variable(1.0, 0), D2::variable(4.0, 1));
static_assert(rational_at_1_4.val == 2.5);
static_assert(rational_at_1_4.d[0] == 2.25);
static_assert(rational_at_1_4.d[1] == 0.25);
static_assert(rational(1.0, 4.0) == 2.5); // the same lambda on plain numbers

// Nested duals in a constant expression: x^3 at 3 gives 27, 27, 18.
constexpr DD cube_at_3 = [] {
  DD x = DD::variable(D1::variable(3.0, 0), 0);
  return x * x * x;
}();
static_assert(cube_at_3.val.val == 27.0);
static_assert(cube_at_3.val.d[0] == 27.0 && cube_at_3.d[0].val == 27.0);
static_assert(cube_at_3.d[0].d[0] == 18.0);

// Compound assignment is constexpr too.
constexpr D1 compound = [] {
  D1 x = D1::variable(2.0, 0);
  x *= x;    // x^2: 4, 4
  x += 1;    // 5, 4
  x -= 0.5f; // 4.5, 4
  x /= 2.0;  // 2.25, 2
  return x;
}();
static_assert(compound.val == 2.25 && compound.d[0] == 2.0);

// value_of drops every level of partials.
static_assert(dc::value_of(cube_at_3) == 27.0);
static_assert(dc::value_of(2.5) == 2.5);
static_assert(std::is_same_v<decltype(dc::value_of(cube_at_3)), double>);
static_assert(std::is_same_v<decltype(dc::value_of(F2{})), float>);

// Approximately equal, or the same infinity.
bool near(double a, double b) { return std::isinf(b) ? a == b : a == doctest::Approx(b); }
template <class D> void check_partials(D const &x, double v, double d0, double d1) {
  CHECK_MESSAGE(near(x.val, v), x.val, " vs ", v);
  CHECK_MESSAGE(near(x.d[0], d0), x.d[0], " vs ", d0);
  CHECK_MESSAGE(near(x.d[1], d1), x.d[1], " vs ", d1);
}

} // namespace

TEST_CASE("dual: default, constant and variable construction") {
  D2 z{};
  CHECK(z.val == 0.0);
  CHECK(z.d[0] == 0.0);
  CHECK(z.d[1] == 0.0);

  D2 c = 3; // int converts: a constant
  CHECK(c.val == 3.0);
  CHECK(c.d[0] == 0.0);
  CHECK(c.d[1] == 0.0);

  F2 cf = 0.1; // double narrows to the value type
  CHECK(cf.val == 0.1f);

  for (int i = 0; i < 3; ++i) {
    auto v = dual<float, 3>::variable(1.5f, i);
    CHECK(v.val == 1.5f);
    for (int j = 0; j < 3; ++j)
      CHECK(v.d[j] == (i == j ? 1.0f : 0.0f));
  }
}

TEST_CASE("dual: arithmetic between duals follows the sum, product and quotient rules") {
  D2 x = D2::variable(3.0, 0), y = D2::variable(-2.0, 1);
  check_partials(x + y, 1.0, 1.0, 1.0);
  check_partials(x - y, 5.0, 1.0, -1.0);
  check_partials(x * y, -6.0, -2.0, 3.0);
  check_partials(x / y, -1.5, -0.5, -0.75); // d/dy x/y = -x/y^2 = -3/4
  check_partials(-x, -3.0, -1.0, 0.0);
  check_partials(+y, -2.0, 0.0, 1.0);
  check_partials(x * x * y, -18.0, 2 * 3.0 * -2.0, 9.0);
}

TEST_CASE_TEMPLATE("dual: constants of any arithmetic type on either side", T, float, double) {
  using D = dual<T, 2>;
  D x = D::variable(T(4), 0);
  auto check = [](D const &r, double v, double d0) {
    CHECK(r.val == doctest::Approx(v));
    CHECK(r.d[0] == doctest::Approx(d0));
    CHECK(r.d[1] == T(0));
  };
  // int
  check(x + 2, 6, 1);
  check(2 + x, 6, 1);
  check(x - 2, 2, 1);
  check(2 - x, -2, -1);
  check(x * 2, 8, 2);
  check(2 * x, 8, 2);
  check(x / 2, 2, 0.5);
  check(2 / x, 0.5, -2.0 / 16);
  // float
  check(x + 0.5f, 4.5, 1);
  check(0.5f - x, -3.5, -1);
  check(x * 0.25f, 1, 0.25);
  check(1.0f / x, 0.25, -1.0 / 16);
  // double
  check(x - 1.5, 2.5, 1);
  check(1.5 + x, 5.5, 1);
  check(3.0 * x, 12, 3);
  check(x / 8.0, 0.5, 0.125);
  // The result type is the dual type, whatever the constant.
  static_assert(std::is_same_v<decltype(x + 1), D>);
  static_assert(std::is_same_v<decltype(1.0 * x), D>);
  static_assert(std::is_same_v<decltype(x / 2.0f), D>);
}

TEST_CASE("dual: compound assignment with duals and constants") {
  D2 x = D2::variable(2.0, 0), y = D2::variable(5.0, 1);
  D2 a = x;
  a += y; // x + y
  check_partials(a, 7, 1, 1);
  a -= 1; // x + y - 1
  check_partials(a, 6, 1, 1);
  a *= x; // (x + y - 1) x: d/dx = 2x + y - 1 = 8, d/dy = x = 2
  check_partials(a, 12, 8, 2);
  a /= y; // (x + y - 1) x / y: d/dx = 8/5, d/dy = (2 y - 12) / y^2 = -2/25
  check_partials(a, 2.4, 1.6, -2.0 / 25);
  a *= 2.5f;
  check_partials(a, 6, 4, -0.2);
  a /= 3;
  check_partials(a, 2, 4.0 / 3, -0.2 / 3);
}

TEST_CASE("dual: comparisons compare values only") {
  D2 x = D2::variable(1.0, 0), y = D2::variable(1.0, 1); // equal values, different partials
  CHECK(x == y);
  CHECK_FALSE(x != y);
  CHECK(x <= y);
  CHECK(x >= y);
  CHECK_FALSE(x < y);
  CHECK_FALSE(x > y);
  D2 z = 2.0 * y;
  CHECK(x < z);
  CHECK(z > x);
  CHECK(x != z);
  // With constants on either side, of several types.
  CHECK(x == 1);
  CHECK(1 == x);
  CHECK(x < 1.5);
  CHECK(1.5f > x);
  CHECK(x >= 1.0f);
  CHECK(0 <= x);
  CHECK(x != 2);
  static_assert(std::is_same_v<decltype(x < 2), bool>);
  // Nested duals compare their innermost values.
  DD n = DD::variable(D1::variable(-1.0, 0), 0);
  CHECK(n < 0);
  CHECK(n == D1(-1.0));
  CHECK(n > -2.0);
}

TEST_CASE("dual: a lambda that branches on a value takes the same branch for plain and dual") {
  auto f = [](auto x) {
    if (x > 0)
      return x * x;
    else
      return -3 * x;
  };
  for (double x0 : {-2.0, -0.5, 0.0, 0.5, 3.0}) {
    D1 r = f(D1::variable(x0, 0));
    CHECK(r.val == f(x0));
    CHECK(r.d[0] == (x0 > 0 ? 2 * x0 : -3.0));
  }
  // Branching inside nested duals too: the second derivative is that of the taken branch.
  DD r = f(DD::variable(D1::variable(2.0, 0), 0));
  CHECK(r.d[0].d[0] == 2.0);
  r = f(DD::variable(D1::variable(-2.0, 0), 0));
  CHECK(r.d[0].d[0] == 0.0);
  CHECK(r.d[0].val == -3.0);
}

TEST_CASE("dual: value_of") {
  CHECK(dc::value_of(3.5f) == 3.5f);
  CHECK(dc::value_of(D2::variable(-1.25, 1)) == -1.25);
  DD n = DD::variable(D1::variable(0.75, 0), 0);
  CHECK(dc::value_of(n) == 0.75);
  CHECK(dc::value_of(n * n) == 0.5625);
}

TEST_CASE("dual: nested duals give second derivatives, and mix with inner duals as constants") {
  // f(x) = x^2 / (1 + x) at x = 1: f = 1/2, f' = (x^2 + 2x) / (1 + x)^2 = 3/4, f'' = 2 / (1 + x)^3
  // = 1/4.
  DD x = DD::variable(D1::variable(1.0, 0), 0);
  DD r = x * x / (1 + x);
  CHECK(r.val.val == doctest::Approx(0.5));
  CHECK(r.val.d[0] == doctest::Approx(0.75));
  CHECK(r.d[0].val == doctest::Approx(0.75));
  CHECK(r.d[0].d[0] == doctest::Approx(0.25));

  // A dual<double, 1> is a constant for dual<dual<double, 1>, 1>: it has partials in the inner
  // direction only. With a = inner variable t and x = outer variable s, a * x = t s.
  D1 a = D1::variable(3.0, 0);
  dual<D1, 1> s = dual<D1, 1>::variable(D1(2.0), 0);
  auto p = a * s; // d/ds = t = 3, d/dt = s = 2, d2/dsdt = 1
  static_assert(std::is_same_v<decltype(p), dual<D1, 1>>);
  CHECK(p.val.val == 6.0);
  CHECK(p.val.d[0] == 2.0);
  CHECK(p.d[0].val == 3.0);
  CHECK(p.d[0].d[0] == 1.0);
  auto q = s + a;
  CHECK(q.val.val == 5.0);
  CHECK(q.val.d[0] == 1.0);
  CHECK(q.d[0].val == 1.0);
  CHECK(q.d[0].d[0] == 0.0);
  auto q2 = a - s * 2.0;
  CHECK(q2.val.val == -1.0);
  CHECK(q2.d[0].val == -2.0);

  // A constant over a nested dual (one division per level: detail::over), a plain number or an
  // inner dual: 3 / x at x = 2 is 1.5, its derivatives -3 / x^2 and 6 / x^3; a / s with a = t:
  // d/ds = -t / s^2 = -3/4, d/dt = 1 / s = 1/2, d2/dsdt = -1 / s^2 = -1/4.
  DD const x2 = DD::variable(D1::variable(2.0, 0), 0);
  for (DD const &r3 : {3.0 / x2, D1(3.0) / x2, DD(3.0) / x2}) {
    CHECK(r3.val.val == doctest::Approx(1.5));
    CHECK(r3.val.d[0] == doctest::Approx(-0.75));
    CHECK(r3.d[0].val == doctest::Approx(-0.75));
    CHECK(r3.d[0].d[0] == doctest::Approx(0.75));
  }
  auto qa = a / s;
  CHECK(qa.val.val == doctest::Approx(1.5));
  CHECK(qa.val.d[0] == doctest::Approx(0.5));
  CHECK(qa.d[0].val == doctest::Approx(-0.75));
  CHECK(qa.d[0].d[0] == doctest::Approx(-0.25));
  // sqrt and log of a nested dual (their derivatives' 1 / ... by the same rule): at x = 4,
  // sqrt = 2, 1 / (2 sqrt x) = 1/4, -1 / (4 x^1.5) = -1/32; log = log 4, 1 / x, -1 / x^2.
  DD const x4 = DD::variable(D1::variable(4.0, 0), 0);
  DD const r4 = dc::sqrt(x4), l4 = dc::log(x4);
  CHECK(r4.val.val == doctest::Approx(2.0));
  CHECK(r4.val.d[0] == doctest::Approx(0.25));
  CHECK(r4.d[0].val == doctest::Approx(0.25));
  CHECK(r4.d[0].d[0] == doctest::Approx(-1.0 / 32));
  CHECK(l4.val.val == doctest::Approx(std::log(4.0)));
  CHECK(l4.d[0].val == doctest::Approx(0.25));
  CHECK(l4.d[0].d[0] == doctest::Approx(-1.0 / 16));
}

TEST_CASE("dual: select and where with bool conditions") {
  D2 x = D2::variable(1.5, 0), y = D2::variable(-4.0, 1);
  check_partials(dc::select(true, x, y), 1.5, 1, 0);
  check_partials(dc::select(false, x, y), -4, 0, 1);
  check_partials(dc::where(x > y, x, y), 1.5, 1, 0);
  check_partials(dc::where(x < y, x, y), -4, 0, 1);
  // A plain number on either side is a constant (zero partials).
  check_partials(dc::select(false, x, 7), 7, 0, 0);
  check_partials(dc::select(true, 2.5, y), 2.5, 0, 0);
  check_partials(dc::select(false, 2.5f, y), -4, 0, 1);
  check_partials(dc::where(true, x, 0.0), 1.5, 1, 0);
  static_assert(std::is_same_v<decltype(dc::select(true, 1, y)), D2>);
  static_assert(std::is_same_v<decltype(dc::where(true, y, 1.0f)), D2>);
  // Plain numbers select plainly.
  CHECK(dc::select(true, 1.0, 2.0) == 1.0);
  CHECK(dc::where(false, 1.0f, 2.0f) == 2.0f);
  // Nested duals carry every level.
  DD n = DD::variable(D1::variable(2.0, 0), 0);
  DD s = dc::where(n > 1, n * n, DD(0.0));
  CHECK(s.val.val == 4.0);
  CHECK(s.d[0].val == 4.0);
  CHECK(s.d[0].d[0] == 2.0);
  DD t = dc::select(n > 3, n * n, D1(5.0));
  CHECK(t.val.val == 5.0);
  CHECK(t.d[0].d[0] == 0.0);
}

TEST_CASE(
    "dual: where a derivative is infinite, partials of unrelated inputs stay 0 (no inf * 0)") {
  D2 x = D2::variable(0.0, 0), y = D2::variable(3.0, 1);
  double const inf = std::numeric_limits<double>::infinity();
  // d/dy (f(x) + y) = 1 for each f whose derivative at x = 0 (or 1) is infinite
  check_partials(dc::sqrt(x) + y, 3, inf, 1);
  check_partials(dc::cbrt(x) + y, 3, inf, 1);
  check_partials(dc::log(x) + y, -inf, inf, 1);
  check_partials(dc::pow(x, 0.5) + y, 3, inf, 1);
  check_partials(dc::pow(x, y * 0.0 + 0.5) + y, 3, inf, 1);
  D2 one = D2::variable(1.0, 0);
  CHECK((dc::asin(one) + y).d[1] == 1.0);
  CHECK((dc::acos(one) + y).d[1] == 1.0);
  CHECK((dc::atanh(one) + y).d[1] == 1.0);
  CHECK((dc::acosh(one) + y).d[1] == 1.0);
  // x / z at z = 0: the partial of y (not involved) stays 1; of z it is -inf or NaN
  D2 z = D2::variable(0.0, 0);
  check_partials(2.0 / z + y * 0.0 + y, inf, -inf, 1);
  D2 q = D2::variable(5.0, 1) / z; // depends on both: 1/z and -5/z^2
  CHECK(q.d[0] == -inf);
  CHECK(q.d[1] == inf);
  D2 w = x / dc::dual<double, 2>(0.0) + y; // 0 / 0: the value is NaN, d/dy is still 1
  CHECK(std::isnan(w.val));
  CHECK(w.d[0] == inf);
  CHECK(w.d[1] == 1.0);
#if DUALCAST_HAS_SIMD
  // per lane on SIMD batches: lanes at the singular point and ordinary lanes in one batch
  using B = dc::batch<double, dc::native_width<double>>;
  using DB = dual<B, 2>;
  B xs(0.0);
  for (int l = 1; l < B::size; l += 2)
    xs.set(l, 0.25 * l);
  DB bx = DB::variable(xs, 0), by = DB::variable(B(3.0), 1);
  DB r = dc::sqrt(bx) + by;
  for (int l = 0; l < B::size; ++l) {
    CHECK(r.d[1][l] == 1.0);
    if (l % 2)
      CHECK(r.d[0][l] == doctest::Approx(0.5 / std::sqrt(0.25 * l)));
    else
      CHECK(r.d[0][l] == inf);
  }
#endif
}

TEST_CASE("mixed plain arguments: literals of another type work on numbers, batches and duals") {
  auto f = [](auto x) {
    return dualcast::max(x, 0) + dualcast::min(x, 0.5) + dualcast::pow(x, 2.5) +
           dualcast::pow(2, x) + dualcast::atan2(x, 1) + dualcast::hypot(x, 2.0f) +
           dualcast::clamp(x, 0, 1.5) + dualcast::fma(x, 2, 1.0);
  };
  const double x = 0.7;
  const double expect = std::max(x, 0.0) + std::min(x, 0.5) + std::pow(x, 2.5) + std::pow(2.0, x) +
                        std::atan2(x, 1.0) + std::hypot(x, 2.0) + std::clamp(x, 0.0, 1.5) +
                        (2 * x + 1.0);
  CHECK(f(x) == doctest::Approx(expect).epsilon(1e-15));
  CHECK(f(0.7f) == doctest::Approx(expect).epsilon(1e-6));
  // derivative: 1 (max) + 0 (min, x > 0.5) + 2.5 x^1.5 + ln2 2^x + 1/(1+x^2) + x/hypot + 1 + 2
  const double dexpect = 1 + 2.5 * std::pow(x, 1.5) + std::log(2.0) * std::pow(2.0, x) +
                         1 / (1 + x * x) + x / std::hypot(x, 2.0) + 1 + 2;
  auto d = f(dualcast::dual<double, 1>::variable(x, 0));
  CHECK(d.val == doctest::Approx(expect).epsilon(1e-15));
  CHECK(d.d[0] == doctest::Approx(dexpect).epsilon(1e-12));
#if DUALCAST_HAS_SIMD
  using B = dualcast::batch<float, dualcast::native_width<float>>;
  auto b = f(B(0.7f));
  for (int l = 0; l < B::size; ++l)
    CHECK(b[l] == doctest::Approx(expect).epsilon(1e-5));
#endif
}
