// dualcast/math/dual.hpp: the elementwise math library on dual numbers, with derivatives.
//
// Each function is written once for dual<T, N> in terms of the same function on T, so it works
// for T = float, double, a SIMD batch or another dual (second derivatives).
//
// Conventions at non-differentiable points (the choices of PyTorch and JAX):
//   abs'(0) = 0, relu'(0) = 0, sqrt'(0) = +inf, cbrt'(0) = +inf;
//   min/max at a tie give half the derivative to each argument;
//   clamp passes the derivative of x where lo <= x <= hi (inclusive), of lo / hi beyond;
//   d/dx pow(x, y) = 0 where y == 0; d/dy pow(x, y) = 0 where x == 0 and y >= 0, NaN where
//   x < 0 (x^y is real there only at integer y, isolated points where it has no derivative in y;
//   p log x gives the NaN, and a zero tangent or cotangent still wins over it);
//   hypot'(0, 0) = 0; floor, ceil and round have zero derivative.
#pragma once

#include <dualcast/math/scalar.hpp>
#include <dualcast/numbers/dual.hpp>
#if DUALCAST_HAS_SIMD
#include <dualcast/math/simd.hpp>
#endif

#include <numbers>

namespace dualcast {

// ---- selection ---------------------------------------------------------------------------
namespace detail {
// The dual type two arguments promote to (the first dual among them).
template <class A, class B> struct promote_dual {
  using type = std::conditional_t<is_dual_v<A>, std::remove_cvref_t<A>, std::remove_cvref_t<B>>;
};
template <class A, class B> using promote_dual_t = typename promote_dual<A, B>::type;

template <class D, class X> DUALCAST_HD constexpr D as_dual(X const &x) {
  if constexpr (std::is_same_v<std::remove_cvref_t<X>, D>)
    return x;
  else
    return D(typename D::value_type(x));
}
} // namespace detail

template <class C, class A, class B>
requires(is_dual_v<A> || is_dual_v<B>)
    DUALCAST_HD constexpr auto select(C const &c, A const &a, B const &b) {
  using D = detail::promote_dual_t<A, B>;
  D x = detail::as_dual<D>(a), y = detail::as_dual<D>(b);
  D r(select(c, x.val, y.val));
  for (int i = 0; i < D::size; ++i)
    r.d[i] = select(c, x.d[i], y.d[i]);
  return r;
}
// where(c, a, b) is select(c, a, b) under numpy's name.
template <class C, class A, class B>
DUALCAST_HD constexpr auto where(C const &c, A const &a, B const &b) -> decltype(select(c, a, b)) {
  return select(c, a, b);
}

// ---- exponentials and logarithms ----------------------------------------------------------
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> exp(dual<T, N> const &x) {
  T e = exp(x.val);
  return detail::chain(x, e, e);
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> expm1(dual<T, N> const &x) {
  T e = expm1(x.val);
  return detail::chain(x, e, e + T(1));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> exp2(dual<T, N> const &x) {
  T e = exp2(x.val);
  return detail::chain(x, e, e * T(std::numbers::ln2));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> log(dual<T, N> const &x) {
  return detail::chain_checked(x, log(x.val), detail::over(1, x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> log1p(dual<T, N> const &x) {
  return detail::chain_checked(x, log1p(x.val), detail::over(1, x.val + T(1)));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> log2(dual<T, N> const &x) {
  return detail::chain_checked(x, log2(x.val), detail::over(1, x.val * T(std::numbers::ln2)));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> log10(dual<T, N> const &x) {
  return detail::chain_checked(x, log10(x.val), detail::over(1, x.val * T(std::numbers::ln10)));
}

// ---- roots and powers -----------------------------------------------------------------------
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> sqrt(dual<T, N> const &x) {
  T s = sqrt(x.val);
  return detail::chain_checked(x, s, detail::over(0.5, s));
}
// d/dx x^(-1/2) = -r^3 / 2: multiplications of r, no division beyond r's own.
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> rsqrt(dual<T, N> const &x) {
  T r = rsqrt(x.val);
  return detail::chain_checked(x, r, detail::times_constant(-0.5, r * r * r));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> cbrt(dual<T, N> const &x) {
  T c = cbrt(x.val);
  return detail::chain_checked(x, c, detail::over(1, T(3) * c * c));
}
template <class T, int N> DUALCAST_HD dual<T, N> pow(dual<T, N> const &x, dual<T, N> const &y) {
  T p = pow(x.val, y.val);
  T dx = select(y.val == T(0), T(0), y.val * pow(x.val, y.val - T(1)));
  T dy = select(x.val == T(0) && y.val >= T(0), T(0), p * log(x.val));
  return detail::chain2_checked(x, y, p, dx, dy);
}
// A plain constant stays plain at the inner levels of a nested dual: converted to the inner dual
// it would go through dual ^ dual there, whose other partial (log(x) for x < 0, or y 0^(y-1) for
// a zero base) times the constant's zero partials gives NaN second derivatives.
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD dual<T, N> pow(dual<T, N> const &x, S const &s) {
  using C = std::conditional_t<std::is_arithmetic_v<S>, scalar_of_t<T>, T>;
  C y(s);
  T dx = select(y == C(0), T(0), y * pow(x.val, y - C(1)));
  return detail::chain_checked(x, pow(x.val, y), dx);
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD dual<T, N> pow(S const &s, dual<T, N> const &y) {
  using C = std::conditional_t<std::is_arithmetic_v<S>, scalar_of_t<T>, T>;
  C b(s);
  T p = pow(b, y.val);
  T dy = select(b == C(0) && y.val >= T(0), T(0), p * log(b));
  return detail::chain_checked(y, p, dy);
}
template <class T, int N> DUALCAST_HD dual<T, N> pow(dual<T, N> const &x, int n) {
  T dx = n == 0 ? T(0) : T(n) * pow(x.val, n - 1);
  return detail::chain_checked(x, pow(x.val, n), dx);
}

// ---- trigonometric and hyperbolic ---------------------------------------------------------
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> sin(dual<T, N> const &x) {
  return detail::chain(x, sin(x.val), cos(x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> cos(dual<T, N> const &x) {
  return detail::chain(x, cos(x.val), -sin(x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> tan(dual<T, N> const &x) {
  T t = tan(x.val);
  return detail::chain(x, t, T(1) + t * t);
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> asin(dual<T, N> const &x) {
  return detail::chain_checked(x, asin(x.val), detail::over(1, sqrt(T(1) - x.val * x.val)));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> acos(dual<T, N> const &x) {
  return detail::chain_checked(x, acos(x.val), detail::over(-1, sqrt(T(1) - x.val * x.val)));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> atan(dual<T, N> const &x) {
  return detail::chain(x, atan(x.val), detail::over(1, T(1) + x.val * x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> sinh(dual<T, N> const &x) {
  return detail::chain(x, sinh(x.val), cosh(x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> cosh(dual<T, N> const &x) {
  return detail::chain(x, cosh(x.val), sinh(x.val));
}
namespace detail {
#if DUALCAST_HAS_SIMD
template <class T> inline constexpr bool is_double_batch_v = false;
template <int W> inline constexpr bool is_double_batch_v<batch<double, W>> = true;
template <class T> inline constexpr bool is_float_batch_v = false;
template <int W> inline constexpr bool is_float_batch_v<batch<float, W>> = true;
#endif
// tanh'(x) = 1 - t^2, given t = tanh(x), without forming 1 - t^2: it cancels where the activation
// saturates (|x| > 4 in float: a derivative of 16-bit training's saturated gates lost to
// rounding).
template <class T> DUALCAST_HD DUALCAST_MATH_INLINE T tanh_slope(T const &x, T const &t) {
  if constexpr (is_dual_v<T>) {
    // Nested (second derivatives): the slope's own derivative is -2 t (1 - t^2), from the inner
    // slope; no exp or division beyond the innermost level's.
    auto const s = tanh_slope(x.val, t.val);
    return chain(x, s, decltype(s)(-2) * t.val * s);
#if DUALCAST_HAS_SIMD
  } else if constexpr (is_double_batch_v<T>) {
    // q (2 - q), q = 2 / (exp(2 |x|) + 1): the exp and the division tanh's value took above 0.625
    // (the same expressions, merged by the compiler), where 4 e / (1 + e)^2 with e = exp(-2 |x|)
    // took a second exp and division. exp overflows to inf: q = 0, the slope 0.
    T z = abs(x);
    T q = 2.0 / (exp(z + z) + 1.0);
    return q * (2.0 - q);
  } else if constexpr (is_float_batch_v<T>) {
    // 4 e / (1 + e)^2 with e = exp(-2 |x|), the division through the activation: 1 + |t| is
    // 2 / (1 + e), to t's few ulp (the ulp of 2, where 1 - |t| is lost), so e (1 + |t|)^2.
    // (Float SIMD batches only: on CUDA, keeping t live across the exp made the double LSTM
    // cell's VJP kernels spill.)
    T e = exp(T(-2) * abs(x)), u = T(1) + abs(t);
    return e * (u * u);
#endif
  } else {
    (void)t;
    T e = exp(T(-2) * abs(x)), r = T(1) / (T(1) + e);
    return T(4) * e * r * r;
  }
}
} // namespace detail
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> tanh(dual<T, N> const &x) {
  T t = tanh(x.val);
  return detail::chain(x, t, detail::tanh_slope(x.val, t));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> asinh(dual<T, N> const &x) {
  return detail::chain(x, asinh(x.val), detail::over(1, sqrt(x.val * x.val + T(1))));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> acosh(dual<T, N> const &x) {
  return detail::chain_checked(x, acosh(x.val),
                               detail::over(1, sqrt(x.val - T(1)) * sqrt(x.val + T(1))));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> atanh(dual<T, N> const &x) {
  return detail::chain_checked(x, atanh(x.val), detail::over(1, T(1) - x.val * x.val));
}
template <class A, class B>
requires(is_dual_v<A> || is_dual_v<B>) DUALCAST_HD auto atan2(A const &ya, B const &xa) {
  using D = detail::promote_dual_t<A, B>;
  using T = typename D::value_type;
  D y = detail::as_dual<D>(ya), x = detail::as_dual<D>(xa);
  T inv = detail::over(1, x.val * x.val + y.val * y.val);
  return detail::chain2(y, x, atan2(y.val, x.val), x.val * inv, -y.val * inv);
}
template <class A, class B>
requires(is_dual_v<A> || is_dual_v<B>) DUALCAST_HD auto hypot(A const &xa, B const &ya) {
  using D = detail::promote_dual_t<A, B>;
  using T = typename D::value_type;
  D x = detail::as_dual<D>(xa), y = detail::as_dual<D>(ya);
  T h = hypot(x.val, y.val);
  T inv = select(h == T(0), T(0), T(1) / h);
  return detail::chain2(x, y, h, x.val * inv, y.val * inv);
}

// ---- error function -------------------------------------------------------------------------
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> erf(dual<T, N> const &x) {
  return detail::chain(x, erf(x.val), T(std::numbers::inv_sqrtpi * 2) * exp(-x.val * x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> erfc(dual<T, N> const &x) {
  return detail::chain(x, erfc(x.val), T(-std::numbers::inv_sqrtpi * 2) * exp(-x.val * x.val));
}

// Phi'(x) = exp(-x^2 / 2) / sqrt(2 pi).
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> normcdf(dual<T, N> const &x) {
  return detail::chain(x, normcdf(x.val),
                       T(std::numbers::inv_sqrtpi / std::numbers::sqrt2) *
                           exp(T(-0.5) * (x.val * x.val)));
}

// ---- piecewise functions --------------------------------------------------------------------
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> abs(dual<T, N> const &x) {
  T sign = select(x.val > T(0), T(1), select(x.val < T(0), T(-1), T(0)));
  return detail::chain(x, abs(x.val), sign);
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> relu(dual<T, N> const &x) {
  return detail::chain(x, relu(x.val), select(x.val > T(0), T(1), T(0)));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> floor(dual<T, N> const &x) {
  return dual<T, N>(floor(x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> ceil(dual<T, N> const &x) {
  return dual<T, N>(ceil(x.val));
}
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> round(dual<T, N> const &x) {
  return dual<T, N>(round(x.val));
}
template <class A, class B>
requires(is_dual_v<A> || is_dual_v<B>) DUALCAST_HD auto max(A const &aa, B const &ba) {
  using D = detail::promote_dual_t<A, B>;
  using T = typename D::value_type;
  D a = detail::as_dual<D>(aa), b = detail::as_dual<D>(ba);
  T wa = select(a.val > b.val, T(1), select(a.val < b.val, T(0), T(0.5)));
  return detail::chain2(a, b, max(a.val, b.val), wa, T(1) - wa);
}
template <class A, class B>
requires(is_dual_v<A> || is_dual_v<B>) DUALCAST_HD auto min(A const &aa, B const &ba) {
  using D = detail::promote_dual_t<A, B>;
  using T = typename D::value_type;
  D a = detail::as_dual<D>(aa), b = detail::as_dual<D>(ba);
  T wa = select(a.val < b.val, T(1), select(a.val > b.val, T(0), T(0.5)));
  return detail::chain2(a, b, min(a.val, b.val), wa, T(1) - wa);
}
template <class X, class L, class H>
requires(is_dual_v<X> || is_dual_v<L> || is_dual_v<H>)
    DUALCAST_HD auto clamp(X const &xa, L const &la, H const &ha) {
  using D = detail::promote_dual_t<X, detail::promote_dual_t<L, H>>;
  D x = detail::as_dual<D>(xa), lo = detail::as_dual<D>(la), hi = detail::as_dual<D>(ha);
  return select(x.val < lo.val, lo, select(x.val > hi.val, hi, x));
}
namespace detail {
// fma's partials recomputed zero-wins (a branch kept: see detail::chain_zero_wins).
template <class D>
DUALCAST_HD constexpr void fma_zero_wins(D &r, D const &a, D const &b, D const &c) {
  DUALCAST_KEEP_BRANCH();
  for (int i = 0; i < D::size; ++i)
    r.d[i] = zero_wins(a.d[i], b.val) + zero_wins(a.val, b.d[i]) + c.d[i];
}
} // namespace detail
template <class A, class B, class C>
requires(is_dual_v<A> || is_dual_v<B> || is_dual_v<C>)
    DUALCAST_HD auto fma(A const &aa, B const &ba, C const &ca) {
  using D = detail::promote_dual_t<A, detail::promote_dual_t<B, C>>;
  D a = detail::as_dual<D>(aa), b = detail::as_dual<D>(ba), c = detail::as_dual<D>(ca);
  D r(fma(a.val, b.val, c.val));
  for (int i = 0; i < D::size; ++i)
    r.d[i] = a.d[i] * b.val + a.val * b.d[i] + c.d[i];
  if constexpr (detail::checks_each_step<typename D::value_type>) {
    if (!detail::partials_finite(r)) [[unlikely]] // zero-wins products: see detail::chain
      detail::fma_zero_wins(r, a, b, c);
  }
  return r;
}

// ---- activations ------------------------------------------------------------------------------
template <class T, int N> DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> sigmoid(dual<T, N> const &x) {
  T s = sigmoid(x.val);
  // s (1 - s) with 1 - s as e s, e = exp(-x), for x >= 0: 1 - s cancels where the gate saturates
  // (x > 8 in float: the relative error of s (1 - s) passes 2^-8 there; 16-bit training's
  // saturated gates). e is the exp the value s = 1 / (1 + e) took (the same expression, merged by
  // the compiler on SIMD batches): no second exp. For x < 0, 1 - s does not cancel (and e s is
  // inf * 0 below -88 in float).
  T e = exp(-x.val);
  return detail::chain(x, s, s * select(x.val >= T(0), e * s, T(1) - s));
}
template <class T, int N>
DUALCAST_HD DUALCAST_MATH_INLINE dual<T, N> softplus(dual<T, N> const &x) {
  return detail::chain(x, softplus(x.val), sigmoid(x.val));
}

} // namespace dualcast
