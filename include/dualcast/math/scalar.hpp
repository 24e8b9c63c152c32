// dualcast/math/scalar.hpp: the elementwise math library on plain float and double.
//
// The same names exist for SIMD batches (math/simd.hpp) and duals (math/dual.hpp), so one
// generic lambda runs on all of them. On plain numbers these forward to the C math library,
// which nvcc also provides in device code.
#pragma once

#include <dualcast/core/config.hpp>

#include <cmath>
#include <concepts>
#include <math.h> // NOLINT(modernize-deprecated-headers): the global ::expf etc. exist in device code too
#include <type_traits>

namespace dualcast {

#define DUALCAST_DETAIL_UNARY_C(name)                                                              \
  template <std::floating_point T> DUALCAST_HD inline T name(T x) {                                \
    if constexpr (sizeof(T) == sizeof(float))                                                      \
      return ::name##f(x);                                                                         \
    else                                                                                           \
      return ::name(static_cast<double>(x));                                                       \
  }
DUALCAST_DETAIL_UNARY_C(exp)
DUALCAST_DETAIL_UNARY_C(expm1)
DUALCAST_DETAIL_UNARY_C(exp2)
DUALCAST_DETAIL_UNARY_C(log)
DUALCAST_DETAIL_UNARY_C(log1p)
DUALCAST_DETAIL_UNARY_C(log2)
DUALCAST_DETAIL_UNARY_C(log10)
DUALCAST_DETAIL_UNARY_C(sqrt)
DUALCAST_DETAIL_UNARY_C(cbrt)
DUALCAST_DETAIL_UNARY_C(sin)
DUALCAST_DETAIL_UNARY_C(cos)
DUALCAST_DETAIL_UNARY_C(tan)
DUALCAST_DETAIL_UNARY_C(asin)
DUALCAST_DETAIL_UNARY_C(acos)
DUALCAST_DETAIL_UNARY_C(atan)
DUALCAST_DETAIL_UNARY_C(sinh)
DUALCAST_DETAIL_UNARY_C(cosh)
DUALCAST_DETAIL_UNARY_C(tanh)
DUALCAST_DETAIL_UNARY_C(asinh)
DUALCAST_DETAIL_UNARY_C(acosh)
DUALCAST_DETAIL_UNARY_C(atanh)
DUALCAST_DETAIL_UNARY_C(erf)
DUALCAST_DETAIL_UNARY_C(erfc)
DUALCAST_DETAIL_UNARY_C(floor)
DUALCAST_DETAIL_UNARY_C(ceil)
#undef DUALCAST_DETAIL_UNARY_C

// rsqrt(x) = 1 / sqrt(x), rounded twice as written (the same bits on the CPU and the GPU: not
// CUDA's approximate rsqrt). On duals its derivative is -r^3 / 2, r = rsqrt(x): one square root and
// one division per nesting level, where 1 / sqrt(x) takes a division more at each (math/dual.hpp).
template <std::floating_point T> DUALCAST_HD inline T rsqrt(T x) { return T(1) / sqrt(x); }

// round: to the nearest integer, ties to even (NumPy's, PyTorch's and JAX's rounding; the C
// library's round() sends ties away from zero).
template <std::floating_point T> DUALCAST_HD inline T round(T x) {
  if constexpr (sizeof(T) == sizeof(float))
    return ::nearbyintf(x);
  else
    return ::nearbyint(static_cast<double>(x));
}

#define DUALCAST_DETAIL_BINARY_C(name)                                                             \
  template <std::floating_point T> DUALCAST_HD inline T name(T x, T y) {                           \
    if constexpr (sizeof(T) == sizeof(float))                                                      \
      return ::name##f(x, y);                                                                      \
    else                                                                                           \
      return ::name(static_cast<double>(x), static_cast<double>(y));                               \
  }
DUALCAST_DETAIL_BINARY_C(pow)
DUALCAST_DETAIL_BINARY_C(atan2)
DUALCAST_DETAIL_BINARY_C(hypot)
#undef DUALCAST_DETAIL_BINARY_C

template <std::floating_point T> DUALCAST_HD inline T fma(T a, T b, T c) {
  if constexpr (sizeof(T) == sizeof(float))
    return ::fmaf(a, b, c);
  else
    return ::fma(static_cast<double>(a), static_cast<double>(b), static_cast<double>(c));
}

// Integer powers: pow(x, n) with an integral exponent (constrained, so that a floating-point
// exponent of another type is not silently truncated to int).
template <std::floating_point T, std::integral I> DUALCAST_HD inline T pow(T x, I n) {
  return dualcast::pow(x, static_cast<T>(n));
}

// normcdf(x): the standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2. Through erfc, not
// (1 + erf) / 2, so that the lower tail keeps its relative accuracy (Phi(-30) ~ 4.9e-198, not 0).
template <std::floating_point T> DUALCAST_HD inline T normcdf(T x) {
  return T(0.5) * dualcast::erfc(x * T(-0.70710678118654752440)); // (-1 / sqrt 2)
}

// Branch-free helpers with value semantics shared by every type.
template <std::floating_point T> DUALCAST_HD constexpr T abs(T x) {
  return x < T(0) ? -x : (x == T(0) ? T(0) : x); // abs(-0) == +0
}
// NaN propagates through min and max (like PyTorch's minimum/maximum, unlike std::fmin).
template <std::floating_point T> DUALCAST_HD constexpr T max(T a, T b) {
  return (a > b || a != a) ? a : b; // NOLINT(misc-redundant-expression): a != a tests for NaN
}
template <std::floating_point T> DUALCAST_HD constexpr T min(T a, T b) {
  return (a < b || a != a) ? a : b; // NOLINT(misc-redundant-expression): a != a tests for NaN
}
template <std::floating_point T> DUALCAST_HD constexpr T clamp(T x, T lo, T hi) {
  return dualcast::min(dualcast::max(x, lo), hi);
}
template <std::floating_point T> DUALCAST_HD constexpr T relu(T x) {
  return x < T(0) ? T(0) : x; // NaN propagates
}
template <std::floating_point T> DUALCAST_HD inline T sigmoid(T x) {
  return T(1) / (T(1) + dualcast::exp(-x));
}
// softplus(x) = log(1 + exp(x)) without overflow for large x.
template <std::floating_point T> DUALCAST_HD inline T softplus(T x) {
  return dualcast::max(x, T(0)) + dualcast::log1p(dualcast::exp(-dualcast::abs(x)));
}

// Mixed plain arguments (max(x, 0) with x a float, pow(float, double), ...) are computed in the
// common floating type, so a generic lambda written with literals works on plain numbers too.
namespace detail {
template <class... A>
concept mixed_plain = (std::is_arithmetic_v<A> && ...) &&
                      !(std::is_same_v<A, std::common_type_t<A...>> && ...);
template <class... A>
using plain_common_t = std::conditional_t<std::is_integral_v<std::common_type_t<A...>>, double,
                                          std::common_type_t<A...>>;
} // namespace detail
template <class A, class B>
requires detail::mixed_plain<A, B> DUALCAST_HD constexpr auto max(A a, B b) {
  using R = detail::plain_common_t<A, B>;
  return dualcast::max(R(a), R(b));
}
template <class A, class B>
requires detail::mixed_plain<A, B> DUALCAST_HD constexpr auto min(A a, B b) {
  using R = detail::plain_common_t<A, B>;
  return dualcast::min(R(a), R(b));
}
template <class A, class B>
requires(detail::mixed_plain<A, B> && !(std::is_floating_point_v<A> && std::is_integral_v<B>))
    DUALCAST_HD inline auto pow(A a, B b) {
  using R = detail::plain_common_t<A, B>;
  return dualcast::pow(R(a), R(b));
}
template <class A, class B>
requires detail::mixed_plain<A, B> DUALCAST_HD inline auto atan2(A a, B b) {
  using R = detail::plain_common_t<A, B>;
  return dualcast::atan2(R(a), R(b));
}
template <class A, class B>
requires detail::mixed_plain<A, B> DUALCAST_HD inline auto hypot(A a, B b) {
  using R = detail::plain_common_t<A, B>;
  return dualcast::hypot(R(a), R(b));
}
template <class X, class L, class H>
requires detail::mixed_plain<X, L, H> DUALCAST_HD constexpr auto clamp(X x, L lo, H hi) {
  using R = detail::plain_common_t<X, L, H>;
  return dualcast::clamp(R(x), R(lo), R(hi));
}
template <class A, class B, class C>
requires detail::mixed_plain<A, B, C> DUALCAST_HD inline auto fma(A a, B b, C c) {
  using R = detail::plain_common_t<A, B, C>;
  return dualcast::fma(R(a), R(b), R(c));
}

// select(c, a, b): a where c holds, else b. Both sides are evaluated (like numpy.where).
template <class A, class B>
requires(std::is_arithmetic_v<A> &&std::is_arithmetic_v<B>)
    DUALCAST_HD constexpr auto select(bool c, A a, B b) {
  using R = decltype(a + b);
  return c ? static_cast<R>(a) : static_cast<R>(b);
}

} // namespace dualcast
