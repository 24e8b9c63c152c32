// dualcast/numbers/float16.hpp: 16-bit floating-point storage types, bfloat16 and half (IEEE
// 754 binary16), for storing values at half the bytes of float and computing in float.
//
//   dualcast::bfloat16 b(3.14159f);   // rounded to nearest, ties to even: 3.140625
//   float f = b;                      // exact: every bfloat16 and every half is a float
//   dualcast::half h(1e-6f);          // a subnormal half (5.96e-8 steps below 6.1e-5)
//
// Both round once, to nearest with ties to even, as IEEE 754 arithmetic does; NaN stays NaN (its
// sign kept, made quiet), infinities stay infinite, values beyond the largest finite one (bfloat16:
// about 3.39e38; half: 65504) round to infinity as IEEE's rounding says, and half keeps its
// subnormals (bfloat16 has float's exponent range, so every float rounds to a normal, subnormal
// or zero bfloat16 with float's own rules). The conversions are portable bit arithmetic, usable
// on the host and in CUDA device code alike; they are the reference that faster paths (F16C,
// AVX-512 BF16, CUDA's __nv_bfloat16 / __half) must match bit for bit.
#pragma once

#include <dualcast/core/config.hpp>

#include <cstdint>
#include <cstring>

namespace dualcast {

namespace detail {
DUALCAST_HD inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
DUALCAST_HD inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bfloat16 is float's upper half: round the lower 16 bits away, to nearest with ties to even (the
// carry of a rounding up may reach the exponent: the next binade, or infinity -- both right).
DUALCAST_HD inline std::uint16_t bfloat16_bits_of(float f) {
  std::uint32_t const u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: quiet, sign and top payload kept
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  std::uint32_t const bias = 0x7fffu + ((u >> 16) & 1u); // ties to the even upper half
  return static_cast<std::uint16_t>((u + bias) >> 16);
}
DUALCAST_HD inline float float_of_bfloat16(std::uint16_t b) {
  return bits_float(std::uint32_t(b) << 16);
}

// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals below 2^-14.
DUALCAST_HD inline std::uint16_t half_bits_of(float f) {
  std::uint32_t const u = float_bits(f);
  auto const sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  std::uint32_t const a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN: quiet, top payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  if (a >= 0x47800000u) // |f| >= 65536 (or infinite): infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) { // |f| >= 2^-14: a normal half (rounding may carry up to infinity,
                          // which is right: 65520 and above round to infinity)
    std::uint32_t const rebased = a - (std::uint32_t(127 - 15) << 23);
    std::uint32_t const bias = 0x0fffu + ((rebased >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rebased + bias) >> 13));
  }
  if (a < 0x33000000u) // |f| < 2^-25 (half of the smallest subnormal, the tie going to 0): zero
    return sign;
  // A subnormal: mantissa with its hidden bit, shifted to units of 2^-24, rounded to even.
  std::uint32_t const exponent = a >> 23; // 102 .. 112
  std::uint32_t const mantissa = (a & 0x007fffffu) | 0x00800000u;
  std::uint32_t const shift = 126u - exponent; // 14 .. 24
  std::uint32_t const kept = mantissa >> shift;
  std::uint32_t const rest = mantissa & ((1u << shift) - 1u);
  std::uint32_t const halfway = 1u << (shift - 1u);
  std::uint32_t const rounded =
      kept + ((rest > halfway || (rest == halfway && (kept & 1u))) ? 1u : 0u);
  return static_cast<std::uint16_t>(sign | rounded); // (a carry to 0x400 is the smallest normal)
}
DUALCAST_HD inline float float_of_half(std::uint16_t h) {
  std::uint32_t const sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t const e = (h >> 10) & 0x1fu, m = h & 0x03ffu;
  if (e == 0x1f) // infinity or NaN (payload kept)
    return bits_float(sign | 0x7f800000u | (m << 13));
  if (e != 0)
    return bits_float(sign | ((e + 127 - 15) << 23) | (m << 13));
  if (m == 0)
    return bits_float(sign);
  // A subnormal: m * 2^-24, exact in float.
  float const v = float(m) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}
} // namespace detail

// bfloat16: float's sign and exponent, 8 bits of precision (7 stored).
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  DUALCAST_HD explicit bfloat16(float f) : bits(detail::bfloat16_bits_of(f)) {}
  DUALCAST_HD operator float() const { return detail::float_of_bfloat16(bits); } // NOLINT
  DUALCAST_HD static bfloat16 from_bits(std::uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
};

// half (IEEE 754 binary16): 11 bits of precision (10 stored), finite up to 65504, subnormals down
// to 2^-24.
struct half {
  std::uint16_t bits = 0;
  half() = default;
  DUALCAST_HD explicit half(float f) : bits(detail::half_bits_of(f)) {}
  DUALCAST_HD operator float() const { return detail::float_of_half(bits); } // NOLINT
  DUALCAST_HD static half from_bits(std::uint16_t b) {
    half x;
    x.bits = b;
    return x;
  }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(half) == 2, "16-bit storage");

} // namespace dualcast
