// dualcast/math/simd.hpp: the elementwise math library on SIMD batches.
//
// exp, expm1, log, log1p, tanh and sigmoid on float batches, and exp, expm1, tanh and sigmoid on
// double batches, are branch-free polynomial or rational approximations (Cephes' and Eigen's
// coefficients, the approach of Eigen's packet math) so that they vectorize without -ffast-math;
// they are tested against the C library to a few ulp over the whole range. The other functions
// apply the C library lane by lane (exact but scalar speed).
#pragma once

#include <dualcast/math/scalar.hpp>
#include <dualcast/numbers/simd.hpp>

#if DUALCAST_HAS_SIMD

#include <concepts>
#include <cstdint>
#include <limits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace dualcast {

namespace detail {
template <class T, int W, class F> inline batch<T, W> map_lanes(batch<T, W> x, F f) {
  batch<T, W> r;
  for (int i = 0; i < W; ++i)
    r.v[i] = f(x.v[i]);
  return r;
}
template <class T, int W, class F> inline batch<T, W> map_lanes(batch<T, W> x, batch<T, W> y, F f) {
  batch<T, W> r;
  for (int i = 0; i < W; ++i)
    r.v[i] = f(x.v[i], y.v[i]);
  return r;
}
template <class T, int W> inline batch<T, W> blend(mask<T, W> m, batch<T, W> a, batch<T, W> b) {
  return {m.v ? a.v : b.v}; // the vector conditional: one masked blend (or min/max) instruction
}
#if defined(__AVX512F__)
// The zero-masking forms with every lane selected: the same instruction as the unmasked
// intrinsics, whose _mm512_undefined_ps() trips g++ 12's -Wmaybe-uninitialized.
inline constexpr __mmask16 all_lanes16 = 0xffff;
#endif
// x clamped to [lo, hi]; NaN passes through. For float, one max and one min instruction on x86
// (their operand order returns the second operand, x, when it is NaN); else two blends.
template <class T, int W>
inline batch<T, W> clamp_keep_nan(batch<T, W> x, batch<T, W> lo, batch<T, W> hi) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && W == 16)
    return {_mm512_maskz_min_ps(all_lanes16, hi.v, _mm512_maskz_max_ps(all_lanes16, lo.v, x.v))};
#endif
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> && W == 8)
    return {_mm256_min_ps(hi.v, _mm256_max_ps(lo.v, x.v))};
#endif
  x = blend(x < lo, lo, x);
  return blend(x > hi, hi, x);
}
// 2^n for integral-valued n in [-126, 127], built from the exponent bits.
template <int W> inline batch<float, W> exp2_int(batch<float, W> n) {
  using iv = typename mask<float, W>::vec_t;
  iv k = __builtin_convertvector(n.v, iv);
  iv bits = (k + 127) << 23;
  return {__builtin_bit_cast(typename batch<float, W>::vec_t, bits)};
}
// Round to nearest integer (|x| < 2^22), branch-free.
template <int W> inline batch<float, W> round_nearest(batch<float, W> x) {
#if defined(__AVX512F__)
  if constexpr (W == 16)
    return {_mm512_maskz_roundscale_ps(all_lanes16, x.v,
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
#endif
  const batch<float, W> magic(12582912.0f); // 1.5 * 2^23
  return (x + magic) - magic;
}
// y * 2^n for integral-valued n in [-150, 128], with overflow to inf and gradual underflow
// rounded once. AVX-512 has one instruction for it (vscalefps); elsewhere the scaling goes in
// two steps so that subnormal results and 2^128 still come out right.
template <int W> inline batch<float, W> scale_by_exp2(batch<float, W> y, batch<float, W> n) {
#if defined(__AVX512F__)
  if constexpr (W == 16)
    return {_mm512_maskz_scalef_ps(all_lanes16, y.v, n.v)};
#if defined(__AVX512VL__)
  if constexpr (W == 8)
    return {_mm256_maskz_scalef_ps(__mmask8(0xff), y.v, n.v)};
  if constexpr (W == 4)
    return {_mm_maskz_scalef_ps(__mmask8(0xf), y.v, n.v)};
#endif
#endif
  batch<float, W> n1 = round_nearest(n * 0.5f);
  return y * exp2_int(n1) * exp2_int(n - n1);
}

// The same for double batches: round, 2^n for integral n in [-1022, 1023] (the integer
// from the bits of n + 1.5 * 2^52, which AVX2 reaches without a 64-bit conversion), y * 2^n for
// n in [-1080, 1024].
template <int W> inline batch<double, W> round_nearest(batch<double, W> x) {
  const batch<double, W> magic(6755399441055744.0); // 1.5 * 2^52
  return (x + magic) - magic;
}
template <int W> inline batch<double, W> exp2_int(batch<double, W> n) {
  using iv = typename mask<double, W>::vec_t;
  const batch<double, W> magic(6755399441055744.0);
  iv k = __builtin_bit_cast(iv, (n + magic).v) - __builtin_bit_cast(iv, magic.v);
  iv bits = (k + 1023) << 52;
  return {__builtin_bit_cast(typename batch<double, W>::vec_t, bits)};
}
template <int W> inline batch<double, W> scale_by_exp2(batch<double, W> y, batch<double, W> n) {
#if defined(__AVX512F__)
  if constexpr (W == 8)
    return {_mm512_maskz_scalef_pd(__mmask8(0xff), y.v, n.v)};
#endif
  batch<double, W> n1 = round_nearest(n * 0.5);
  return y * exp2_int(n1) * exp2_int(n - n1);
}
// Cephes' rational approximation of (exp(r) - 1) / 2 for |r| <= 0.5: r P(r^2) / (Q(r^2) - r P).
template <int W> inline batch<double, W> half_expm1_small(batch<double, W> r) {
  using B = batch<double, W>;
  B rr = r * r;
  B p(1.26177193074810590878e-4);
  p = p * rr + 3.02994407707441961300e-2;
  p = p * rr + 9.99999999999999999910e-1;
  p = p * r;
  B q(3.00198505138664455042e-6);
  q = q * rr + 2.52448340349684104192e-3;
  q = q * rr + 2.27265548208155028766e-1;
  q = q * rr + 2.00000000000000000009e0;
  return p / (q - p);
}
} // namespace detail

// ---- selection and simple functions, any batch -------------------------------------------
template <class T, int W> inline batch<T, W> select(mask<T, W> m, batch<T, W> a, batch<T, W> b) {
  return detail::blend(m, a, b);
}
template <class T, int W, class A, class B>
requires((is_batch_v<A> || std::is_arithmetic_v<A>)&&(is_batch_v<B> || std::is_arithmetic_v<B>)&&!(
    is_batch_v<A> && is_batch_v<B>)) inline batch<T, W> select(mask<T, W> m, A const &a,
                                                               B const &b) {
  return detail::blend(m, batch<T, W>(a), batch<T, W>(b));
}
template <class T, int W> inline batch<T, W> select(bool c, batch<T, W> a, batch<T, W> b) {
  return c ? a : b;
}
template <class T, int W> inline batch<T, W> abs(batch<T, W> x) {
  // Clearing the sign bit: |-0| = +0 and NaN stays NaN, like std::fabs, in one instruction.
  using iv = typename mask<T, W>::vec_t;
  using I = typename mask<T, W>::int_t;
  constexpr I magnitude = std::numeric_limits<I>::max();
  return {__builtin_bit_cast(typename batch<T, W>::vec_t, __builtin_bit_cast(iv, x.v) & magnitude)};
}
template <class T, int W> inline batch<T, W> max(batch<T, W> a, batch<T, W> b) {
  return select((a > b) || (a != a), a, b);
}
template <class T, int W> inline batch<T, W> min(batch<T, W> a, batch<T, W> b) {
  return select((a < b) || (a != a), a, b);
}
template <class T, int W> inline batch<T, W> clamp(batch<T, W> x, batch<T, W> lo, batch<T, W> hi) {
  return min(max(x, lo), hi);
}
template <class T, int W> inline batch<T, W> relu(batch<T, W> x) {
  return select(x < T(0), batch<T, W>(T(0)), x);
}
template <class T, int W> inline batch<T, W> fma(batch<T, W> a, batch<T, W> b, batch<T, W> c) {
  batch<T, W> r;
  for (int i = 0; i < W; ++i)
    r.v[i] = dualcast::fma(a.v[i], b.v[i], c.v[i]);
  return r;
}

// A batch with a plain number (max(x, 0.0f), pow(x, 2.5), ...): the number goes to every lane.
#define DUALCAST_DETAIL_BATCH_MIXED(name)                                                          \
  template <class T, int W, class S>                                                               \
  requires std::is_arithmetic_v<S>                                                                 \
  inline batch<T, W> name(batch<T, W> a, S s) { return name(a, batch<T, W>(s)); }                  \
  template <class T, int W, class S>                                                               \
  requires std::is_arithmetic_v<S>                                                                 \
  inline batch<T, W> name(S s, batch<T, W> a) { return name(batch<T, W>(s), a); }
DUALCAST_DETAIL_BATCH_MIXED(max)
DUALCAST_DETAIL_BATCH_MIXED(min)
DUALCAST_DETAIL_BATCH_MIXED(atan2)
DUALCAST_DETAIL_BATCH_MIXED(hypot)
#undef DUALCAST_DETAIL_BATCH_MIXED
template <class T, int W, class B, class C>
requires((is_batch_v<B> || std::is_arithmetic_v<B>)&&(is_batch_v<C> || std::is_arithmetic_v<C>)&&!(
    is_batch_v<B> && is_batch_v<C>)) inline batch<T, W> fma(batch<T, W> a, B b, C c) {
  return fma(a, batch<T, W>(b), batch<T, W>(c));
}
template <class T, int W, std::floating_point S> inline batch<T, W> pow(batch<T, W> a, S s) {
  return pow(a, batch<T, W>(s));
}
template <class T, int W, class S>
requires std::is_arithmetic_v<S>
inline batch<T, W> pow(S s, batch<T, W> a) { return pow(batch<T, W>(s), a); }
template <class T, int W, class L, class H>
requires((is_batch_v<L> || std::is_arithmetic_v<L>)&&(is_batch_v<H> || std::is_arithmetic_v<H>)&&!(
    is_batch_v<L> && is_batch_v<H>)) inline batch<T, W> clamp(batch<T, W> x, L lo, H hi) {
  return clamp(x, batch<T, W>(lo), batch<T, W>(hi));
}

// ---- lane-by-lane functions -----------------------------------------------------------------
#define DUALCAST_DETAIL_LANEWISE(name)                                                             \
  template <class T, int W> inline batch<T, W> name(batch<T, W> x) {                               \
    return detail::map_lanes(x, [](T a) { return dualcast::name(a); });                            \
  }
DUALCAST_DETAIL_LANEWISE(exp2)
DUALCAST_DETAIL_LANEWISE(log2)
DUALCAST_DETAIL_LANEWISE(log10)
DUALCAST_DETAIL_LANEWISE(sqrt)
DUALCAST_DETAIL_LANEWISE(cbrt)
DUALCAST_DETAIL_LANEWISE(sin)
DUALCAST_DETAIL_LANEWISE(cos)
DUALCAST_DETAIL_LANEWISE(tan)
DUALCAST_DETAIL_LANEWISE(asin)
DUALCAST_DETAIL_LANEWISE(acos)
DUALCAST_DETAIL_LANEWISE(atan)
DUALCAST_DETAIL_LANEWISE(sinh)
DUALCAST_DETAIL_LANEWISE(cosh)
DUALCAST_DETAIL_LANEWISE(asinh)
DUALCAST_DETAIL_LANEWISE(acosh)
DUALCAST_DETAIL_LANEWISE(atanh)
DUALCAST_DETAIL_LANEWISE(erf)
DUALCAST_DETAIL_LANEWISE(erfc)
DUALCAST_DETAIL_LANEWISE(floor)
DUALCAST_DETAIL_LANEWISE(ceil)
DUALCAST_DETAIL_LANEWISE(round)
#undef DUALCAST_DETAIL_LANEWISE

// rsqrt as on plain numbers (math/scalar.hpp): equal bit for bit.
template <class T, int W> inline batch<T, W> rsqrt(batch<T, W> x) {
  return batch<T, W>(T(1)) / sqrt(x);
}

// normcdf as on plain numbers (math/scalar.hpp), with erfc lane by lane: equal bit for bit.
template <class T, int W> inline batch<T, W> normcdf(batch<T, W> x) {
  return T(0.5) * erfc(x * T(-0.70710678118654752440));
}

#define DUALCAST_DETAIL_LANEWISE2(name)                                                            \
  template <class T, int W> inline batch<T, W> name(batch<T, W> x, batch<T, W> y) {                \
    return detail::map_lanes(x, y, [](T a, T b) { return dualcast::name(a, b); });                 \
  }
DUALCAST_DETAIL_LANEWISE2(pow)
DUALCAST_DETAIL_LANEWISE2(atan2)
DUALCAST_DETAIL_LANEWISE2(hypot)
#undef DUALCAST_DETAIL_LANEWISE2

template <class T, int W, std::integral I> // integral only: a double exponent must not truncate
inline batch<T, W> pow(batch<T, W> x, I n) {
  return pow(x, batch<T, W>(T(n)));
}

// ---- vectorized float polynomials ------------------------------------------------------------
template <class T, int W> DUALCAST_MATH_INLINE batch<T, W> exp(batch<T, W> x) {
  if constexpr (std::is_same_v<T, double>) {
    using B = batch<double, W>;
    // exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln(2) / 2 (ln 2 in two parts: r exact),
    // exp(r) = 1 + 2 h(r) with Cephes' rational h; clamping to [-746, 710] makes overflow and
    // underflow come out of the scaling, NaN passes.
    B xc = detail::clamp_keep_nan(x, B(-746.0), B(710.0));
    B n = detail::round_nearest(xc * 1.4426950408889634073599);
    B r = xc - n * 6.93145751953125e-1;
    r = r - n * 1.42860682030941723212e-6;
    B h = detail::half_expm1_small(r);
    return detail::scale_by_exp2(h + h + 1.0, n);
  } else {
    using B = batch<float, W>;
    // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln(2) / 2. Clamping to [-104, 89] makes
    // overflow (2^128 = inf) and underflow (2^-150 rounds to 0) come out of the scaling itself;
    // NaN passes the clamp and propagates.
    B xc = detail::clamp_keep_nan(x, B(-104.0f), B(89.0f));
    B n = detail::round_nearest(xc * 1.44269504088896341f);
    B r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    B p(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    B y = p * (r * r) + r + 1.0f;
    return detail::scale_by_exp2(y, n);
  }
}

template <class T, int W> inline batch<T, W> expm1(batch<T, W> x) {
  if constexpr (std::is_same_v<T, double>) {
    using B = batch<double, W>;
    // Cephes: the rational approximation on [-0.5, 0.5] (relative accuracy near 0, the sign of
    // zero kept), exp(x) - 1 outside.
    B h = detail::half_expm1_small(x);
    return select(abs(x) <= 0.5, h + h, exp(x) - 1.0);
  } else {
    using B = batch<float, W>;
    // Near zero a Taylor polynomial keeps the relative accuracy that exp(x) - 1 loses.
    B p(1.0f / 362880.0f);
    p = p * x + 1.0f / 40320.0f;
    p = p * x + 1.0f / 5040.0f;
    p = p * x + 1.0f / 720.0f;
    p = p * x + 1.0f / 120.0f;
    p = p * x + 1.0f / 24.0f;
    p = p * x + 1.0f / 6.0f;
    p = p * x + 0.5f;
    B small = p * (x * x) + x;
    B large = exp(x) - 1.0f;
    return select(x == 0.0f, x, select(abs(x) < 0.5f, small, large)); // keeps the sign of zero
  }
}

template <class T, int W> inline batch<T, W> log(batch<T, W> x) {
  if constexpr (std::is_same_v<T, double>) {
    return detail::map_lanes(x, [](double a) { return dualcast::log(a); });
  } else {
    using B = batch<float, W>;
    using iv = typename mask<float, W>::vec_t;
    // Subnormals: scale into the normal range first.
    auto tiny = x < std::numeric_limits<float>::min();
    B xs = select(tiny, x * 8388608.0f, x); // 2^23
    iv bits = __builtin_bit_cast(iv, xs.v);
    iv ei = ((bits >> 23) & 0xff) - 126;
    iv mi = (bits & 0x807fffff) | 0x3f000000; // mantissa in [0.5, 1)
    B m{__builtin_bit_cast(typename B::vec_t, mi)};
    B e{__builtin_convertvector(ei, typename B::vec_t)};
    e = select(tiny, e - 23.0f, e);
    auto below = m < 0.707106781186547524f;
    e = select(below, e - 1.0f, e);
    B f = select(below, m + m - 1.0f, m - 1.0f);
    B z = f * f;
    B y(7.0376836292e-2f);
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z;
    y = y + e * -2.12194440e-4f;
    y = y - z * 0.5f;
    B r = f + y;
    r = r + e * 0.693359375f;
    constexpr float inf = std::numeric_limits<float>::infinity();
    r = select(x == 0.0f, B(-inf), r);
    r = select(x == inf, B(inf), r);
    r = select(x < 0.0f, B(std::numeric_limits<float>::quiet_NaN()), r);
    return select(x != x, x, r);
  }
}

template <class T, int W> inline batch<T, W> log1p(batch<T, W> x) {
  if constexpr (std::is_same_v<T, double>) {
    return detail::map_lanes(x, [](double a) { return dualcast::log1p(a); });
  } else {
    using B = batch<float, W>;
    // log1p(x) = log(u) * x / (u - 1) with u = 1 + x corrects the rounding of 1 + x.
    B u = x + 1.0f;
    B d = u - 1.0f;
    B r = select(d == 0.0f, x,
                 log(u) * (x / select(d == 0.0f, B(1.0f), d))); // x / d first: no overflow
    return select(x == std::numeric_limits<float>::infinity(), x, r);
  }
}

namespace detail {
// float tanh, the default: a rational approximation p(x) / q(x) on [-7.99, 7.99], the
// coefficients of Eigen's fast float tanh; tanh(x) = x below 4e-4, and +-1 beyond 13 ln 2 (where
// tanhf rounds to +-1). Up to 5 ulp from the correctly rounded value near +-1, which 1 - tanh^2
// magnifies in derivatives.
template <int W> inline batch<float, W> tanh_fast(batch<float, W> x) {
  using B = batch<float, W>;
  constexpr float bound = 7.99881172180175781f;
  B xc = clamp_keep_nan(x, B(-bound), B(bound));
  B x2 = xc * xc;
  B p(-2.76076847742355e-16f);
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * xc;
  B q(1.19825839466702e-06f);
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  B r = blend(abs(x) > 9.01091334f, blend(x < 0.0f, B(-1.0f), B(1.0f)), p / q);
  return blend(abs(x) < 0.0004f, x, r);
}
// float tanh with DUALCAST_PRECISE_TANH: Cephes' tanhf, below 0.625 x + x^3 P(x^2), above
// 1 - 2 / (exp(2 |x|) + 1) with x's sign (exp's error scaled down by 2 / (e + 1) < 0.6): within
// 1 ulp of the correctly rounded value over all floats, at about 30 % more time for the LSTM
// cell's fused VJP (CHANGELOG.md, 2026-11-25). +-1 beyond 9.01, x below 4e-4 (the sign of zero
// kept); NaN takes the polynomial and propagates.
template <int W> inline batch<float, W> tanh_precise(batch<float, W> x) {
  using B = batch<float, W>;
  B z = abs(x);
  B e = exp(z + z);
  B big = 1.0f - 2.0f / (e + 1.0f);
  B s2 = x * x;
  B p(-5.70498872745e-3f);
  p = p * s2 + 2.06390887954e-2f;
  p = p * s2 - 5.37397155531e-2f;
  p = p * s2 + 1.33314422036e-1f;
  p = p * s2 - 3.33332819422e-1f;
  B r = blend(z >= 0.625f, blend(x < 0.0f, -big, big), p * s2 * x + x);
  r = blend(z > 9.01091334f, blend(x < 0.0f, B(-1.0f), B(1.0f)), r);
  return blend(abs(x) < 0.0004f, x, r);
}
} // namespace detail

template <class T, int W> DUALCAST_MATH_INLINE batch<T, W> tanh(batch<T, W> x) {
  if constexpr (std::is_same_v<T, double>) {
    using B = batch<double, W>;
    // Cephes: below 0.625 x + x^3 P(x^2) / Q(x^2); above, 1 - 2 / (exp(2 |x|) + 1) with x's sign
    // (exp overflows to inf for large |x|: exactly 1). NaN takes the first form and propagates;
    // zeros keep their sign.
    B z = abs(x);
    B s = x * x;
    B p(-9.64399179425052238628e-1);
    p = p * s - 9.92877231001918586564e1;
    p = p * s - 1.61468768441708447952e3;
    B q = s + 1.12811678491632931402e2;
    q = q * s + 2.23548839060100448583e3;
    q = q * s + 4.84406305325125486048e3;
    B small = x + x * s * (p / q);
    B e = exp(z + z);
    B large = 1.0 - 2.0 / (e + 1.0);
    return select(z >= 0.625, select(x < 0.0, -large, large), select(z == 0.0, x, small));
  } else {
#if defined(DUALCAST_PRECISE_TANH)
    return detail::tanh_precise(x);
#else
    return detail::tanh_fast(x);
#endif
  }
}

template <class T, int W> DUALCAST_MATH_INLINE batch<T, W> sigmoid(batch<T, W> x) {
  return T(1) / (exp(-x) + T(1));
}
template <class T, int W> inline batch<T, W> softplus(batch<T, W> x) {
  return max(x, batch<T, W>(T(0))) + log1p(exp(-abs(x)));
}

} // namespace dualcast
#endif // DUALCAST_HAS_SIMD
