// bfloat16 and half (dualcast/numbers/float16.hpp): every 16-bit pattern back and forth, and the
// rounding of floats against an independent reference -- the nearest representable value found
// by searching the sorted list of all finite values (ties to the even bit pattern) -- and, where
// the CPU has F16C, against the hardware's float -> half conversion.
#include <dualcast/numbers/float16.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace dc = dualcast;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The reference: the finite non-negative values of a 16-bit type in increasing order, with their
// patterns, and the value past the largest at which rounding goes to infinity (the next binade's
// first value, as if the exponent did not stop).
struct reference {
  std::vector<double> values;
  std::vector<std::uint16_t> patterns;
  double beyond;
  std::uint16_t inf;

  template <class Decode>
  reference(Decode decode, std::uint16_t inf_bits, double beyond_largest)
      : beyond(beyond_largest), inf(inf_bits) {
    for (std::uint32_t b = 0; b < inf_bits; ++b) { // (positive patterns below infinity ascend)
      values.push_back(decode(std::uint16_t(b)));
      patterns.push_back(std::uint16_t(b));
    }
  }
  // The pattern of the nearest value to |x| (x finite), ties to the even pattern.
  std::uint16_t round(double x) const {
    double const a = std::abs(x);
    std::uint16_t const sign = std::signbit(x) ? 0x8000 : 0;
    auto it = std::lower_bound(values.begin(), values.end(), a);
    if (it == values.end()) { // above the largest: it or infinity
      double const lo = values.back(), mid = (lo + beyond) / 2;
      if (a < mid)
        return sign | patterns.back();
      if (a > mid)
        return sign | inf;
      return sign | ((patterns.back() & 1) ? inf : patterns.back()); // (infinity is even)
    }
    std::size_t const hi = std::size_t(it - values.begin());
    if (*it == a || hi == 0)
      return sign | patterns[hi];
    double const up = values[hi], down = values[hi - 1];
    if (a - down < up - a)
      return sign | patterns[hi - 1];
    if (up - a < a - down)
      return sign | patterns[hi];
    return sign | ((patterns[hi] & 1) ? patterns[hi - 1] : patterns[hi]);
  }
};

double decode_half(std::uint16_t b) { // from the definition of binary16
  int const e = (b >> 10) & 0x1f, m = b & 0x3ff;
  double const v = e == 0x1f ? HUGE_VAL // (infinity; NaNs are not decoded)
                   : e == 0  ? std::ldexp(m, -24)
                             : std::ldexp(1024 + m, e - 25);
  return (b & 0x8000) ? -v : v;
}
double decode_bfloat16(std::uint16_t b) { // from float's definition, 7 stored mantissa bits
  int const e = (b >> 7) & 0xff, m = b & 0x7f;
  double const v = e == 0xff ? HUGE_VAL // (infinity; NaNs are not decoded)
                   : e == 0  ? std::ldexp(m, -133)
                             : std::ldexp(128 + m, e - 134);
  return (b & 0x8000) ? -v : v;
}

// Floats that exercise rounding: random patterns, and the exact midpoints between neighbouring
// 16-bit values and one float step either side of them.
std::vector<float> probe_floats(reference const &r, std::uint64_t seed) {
  std::vector<float> fs;
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (int i = 0; i < 200000; ++i)
    fs.push_back(from_bits(rng()));
  for (std::size_t i = 0; i + 1 < r.values.size(); i += 7) {
    float const mid = float((r.values[i] + r.values[i + 1]) / 2);
    fs.push_back(mid);
    fs.push_back(std::nextafter(mid, 0.f));
    fs.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
  }
  for (float f : {0.f, -0.f, 65504.f, 65519.996f, 65520.f, 65536.f, 5.9604645e-8f, 2.9802322e-8f,
                  2.9802326e-8f, 6.1035156e-5f, 6.1035152e-5f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
    for (float s : {1.f, -1.f})
      fs.push_back(s * f);
  return fs;
}

} // namespace

TEST_CASE("half: every pattern converts to float and back -- NaN stays NaN") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    float const f = dc::half::from_bits(std::uint16_t(b));
    bool const nan = ((b >> 10) & 0x1f) == 0x1f && (b & 0x3ff) != 0;
    if (nan) {
      REQUIRE(std::isnan(f));
      CHECK(std::isnan(float(dc::half(f))));
      CHECK((dc::half(f).bits & 0x8000) == (b & 0x8000));
    } else {
      REQUIRE(double(f) == decode_half(std::uint16_t(b)));
      REQUIRE(dc::half(f).bits == b);
    }
  }
}

TEST_CASE("bfloat16: every pattern converts to float and back -- NaN stays NaN") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    float const f = dc::bfloat16::from_bits(std::uint16_t(b));
    bool const nan = ((b >> 7) & 0xff) == 0xff && (b & 0x7f) != 0;
    if (nan) {
      REQUIRE(std::isnan(f));
      CHECK(std::isnan(float(dc::bfloat16(f))));
      CHECK((dc::bfloat16(f).bits & 0x8000) == (b & 0x8000));
    } else {
      REQUIRE(double(f) == decode_bfloat16(std::uint16_t(b)));
      REQUIRE(dc::bfloat16(f).bits == b);
    }
  }
}

TEST_CASE("half: floats round to nearest, ties to even, against the reference") {
  reference const r(decode_half, 0x7c00, 65536.0);
  for (float f : probe_floats(r, 1)) {
    if (std::isnan(f)) {
      CHECK(std::isnan(float(dc::half(f))));
      continue;
    }
    std::uint16_t const want = std::isinf(f) ? (f < 0 ? 0xfc00 : 0x7c00) : r.round(double(f));
    CAPTURE(bits_of(f));
    REQUIRE(dc::half(f).bits == want);
#if defined(__F16C__)
    REQUIRE(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT) == want); // (the hardware agrees)
#endif
  }
}

TEST_CASE("bfloat16: floats round to nearest, ties to even, against the reference") {
  reference const r(decode_bfloat16, 0x7f80, std::ldexp(1.0, 128));
  for (float f : probe_floats(r, 2)) {
    if (std::isnan(f)) {
      CHECK(std::isnan(float(dc::bfloat16(f))));
      continue;
    }
    std::uint16_t const want = std::isinf(f) ? (f < 0 ? 0xff80 : 0x7f80) : r.round(double(f));
    CAPTURE(bits_of(f));
    REQUIRE(dc::bfloat16(f).bits == want);
  }
}
