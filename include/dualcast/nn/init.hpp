// dualcast/nn/init.hpp: parameter initialisation from an explicit seed, the same numbers with
// every compiler and standard library.
//
//   auto W = dualcast::xavier_uniform<float>({784, 128}, 42);      // fan_in 784, fan_out 128
//   auto B = dualcast::uniform<float>({128}, -0.1, 0.1, 43);
//   auto E = dualcast::normal<double>({1000, 64}, 0.0, 0.02, 44);
//
// The bits come from std::mt19937_64 seeded with `seed` (its output is fixed by the C++
// standard); the mapping to numbers is dualcast's own, not std::uniform_real_distribution or
// std::normal_distribution (whose algorithms each standard library chooses):
//   uniform   u = (bits >> 11) * 2^-53 in [0, 1) (double), (bits >> 40) * 2^-24 (float);
//             lo + (hi - lo) * u, computed in T (rounding may reach hi when hi - lo is not exact)
//   normal    Box-Muller on two draws, both of the pair used: sqrt(-2 ln(1 - u1)) * cos(2 pi u2),
//             then the same with sin; computed in double and rounded to T. (std::log / cos / sin:
//             glibc's are correctly rounded in practice; another C library could differ in the
//             last bit of a double result.)
// Elements are filled in row-major order; the tensors are contiguous, on the host (move them with
// tensor::to).
//
// Xavier / Glorot takes fan_in and fan_out from the last two dimensions -- extent(rank - 2) and
// extent(rank - 1), the (in, out) layout of a weight used as matmul(x, W); leading dimensions are
// a batch of independent matrices -- and needs rank >= 2:
//   xavier_uniform  U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))
//   xavier_normal   N(0, s^2) with s = gain * sqrt(2 / (fan_in + fan_out))
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>

namespace dualcast {

namespace detail {
// A uniform number in [0, 1) from 64 random bits: every value a multiple of 2^-53 (double) or
// 2^-24 (float), so that it is exact in T.
template <class T> T unit_uniform(std::uint64_t bits) {
  if constexpr (std::is_same_v<T, float>)
    return static_cast<T>(bits >> 40) * 0x1p-24f;
  else
    return static_cast<T>(bits >> 11) * 0x1p-53;
}
// (fan_in, fan_out) from the last two dimensions.
inline std::pair<double, double> fans(char const *op, shape const &s) {
  if (s.rank < 2)
    throw shape_error(std::string(op) + ": shape " + to_string(s) + " has rank " +
                      std::to_string(s.rank) +
                      "; fan_in and fan_out come from the last two dimensions (rank >= 2)");
  double const in = double(s.ext[s.rank - 2]), out = double(s.ext[s.rank - 1]);
  if (in + out == 0)
    throw shape_error(std::string(op) + ": shape " + to_string(s) + " has fan_in + fan_out = 0");
  return {in, out};
}
} // namespace detail

// Independent draws from U[lo, hi).
template <class T> tensor<T> uniform(shape const &s, T lo, T hi, std::uint64_t seed) {
  std::mt19937_64 bits(seed);
  tensor<T> r = tensor<T>::empty(s);
  T *p = r.raw_data();
  for (index_t i = 0; i < s.size(); ++i)
    p[i] = lo + (hi - lo) * detail::unit_uniform<T>(bits());
  return r;
}

// Independent draws from N(mean, stddev^2) (Box-Muller).
template <class T> tensor<T> normal(shape const &s, T mean, T stddev, std::uint64_t seed) {
  std::mt19937_64 bits(seed);
  tensor<T> r = tensor<T>::empty(s);
  T *p = r.raw_data();
  double const two_pi = 6.283185307179586476925286766559;
  index_t const n = s.size();
  for (index_t i = 0; i < n; i += 2) {
    double const u1 = detail::unit_uniform<double>(bits());
    double const u2 = detail::unit_uniform<double>(bits());
    double const radius = std::sqrt(-2.0 * std::log(1.0 - u1)); // 1 - u1 in (0, 1]
    p[i] = static_cast<T>(double(mean) + double(stddev) * radius * std::cos(two_pi * u2));
    if (i + 1 < n)
      p[i + 1] = static_cast<T>(double(mean) + double(stddev) * radius * std::sin(two_pi * u2));
  }
  return r;
}

// Xavier / Glorot uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
template <class T> tensor<T> xavier_uniform(shape const &s, std::uint64_t seed, double gain = 1.0) {
  auto const [in, out] = detail::fans("dualcast::xavier_uniform", s);
  T const a = static_cast<T>(gain * std::sqrt(6.0 / (in + out)));
  return uniform<T>(s, -a, a, seed);
}

// Xavier / Glorot normal: N(0, s^2), s = gain * sqrt(2 / (fan_in + fan_out)).
template <class T> tensor<T> xavier_normal(shape const &s, std::uint64_t seed, double gain = 1.0) {
  auto const [in, out] = detail::fans("dualcast::xavier_normal", s);
  return normal<T>(s, T(0), static_cast<T>(gain * std::sqrt(2.0 / (in + out))), seed);
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE tensor<T> uniform<T>(shape const &, T, T, std::uint64_t);                   \
  DUALCAST_INSTANTIATE tensor<T> normal<T>(shape const &, T, T, std::uint64_t);                    \
  DUALCAST_INSTANTIATE tensor<T> xavier_uniform<T>(shape const &, std::uint64_t, double);          \
  DUALCAST_INSTANTIATE tensor<T> xavier_normal<T>(shape const &, std::uint64_t, double);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace dualcast
