// dualcast/numbers/simd.hpp: a fixed-width SIMD batch of floats or doubles for the CPU backend.
//
// The CPU backend evaluates a kernel's lambda on batch<T, W> (or on dual<batch<T, W>, N>), so
// that one call computes W elements in vector registers. Comparisons yield a mask<T, W>;
// select(mask, a, b) blends per lane. A mask converts to bool (an `if`, a loop condition) for the
// lanes of the running path (detail::lane_paths): where they all agree that is exact; where they
// disagree the path splits -- this evaluation goes on with the lanes whose condition holds, and
// the others are evaluated again afterwards on their own path. The backend evaluates a batch once
// per distinct path its lanes take and blends the results (backend/cpu/map.hpp), so a lambda with
// data-dependent branches and loops gives every element exactly what it gives on its own.
#pragma once

#include <dualcast/core/config.hpp>

#include <cstdint>

namespace dualcast::detail {
// The lanes of the batch being evaluated on this thread, split by the branches they take:
// `lanes` follow the running evaluation, `pending` are lane sets still to be evaluated on their
// own path (bit i: lane i). A set is pushed when the running lanes disagree at a branch; every
// branch before that point was uniform over both halves, so re-running the kernel with only the
// pushed lanes follows their path up to there, and on.
struct lane_paths {
  bool active = false; // inside the backend's evaluation of a batch
  std::uint32_t lanes = 0;
  int n_pending = 0;
  std::uint32_t pending[32];

  // The truth of the running lanes at a branch (`all`: every lane of the batch), splitting them
  // where they disagree. Outside the backend (a lambda called on batches directly) a branch holds
  // only where it holds in every lane.
  bool take(std::uint32_t true_lanes, std::uint32_t all) {
    if (!active)
      return true_lanes == all;
    std::uint32_t t = true_lanes & lanes;
    if (t == lanes)
      return true;
    if (t == 0)
      return false;
    pending[n_pending++] = lanes & ~t; // (at most one push per lane: the sets are disjoint)
    lanes = t;
    return true;
  }
};
inline lane_paths &current_lane_paths() {
  thread_local lane_paths paths;
  return paths;
}
} // namespace dualcast::detail

#if DUALCAST_HAS_SIMD

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace dualcast {

namespace detail {
template <class T> struct same_size_int;
template <> struct same_size_int<float> { using type = std::int32_t; };
template <> struct same_size_int<double> { using type = std::int64_t; };

} // namespace detail

// The widest native vector: 64 bytes with AVX-512, 32 with AVX, else 16.
//
// On x86-64 without AVX2 (no -march=native, -mavx2 or -march=x86-64-v3: the compiler's default
// is SSE2) the kernels run on narrower vectors (16 bytes; 32 with AVX but without AVX2's integer
// lanes), about 30 % slower (the Black-Scholes Greeks: 74-80 ms against 55-63 ms), and nothing
// else says so: hence a note at compile time, once per translation unit. A build that means it
// defines DUALCAST_NO_SIMD_WARNING to silence it (the CMake package does when the CMake variable
// DUALCAST_NO_SIMD_WARNING is set: see cmake/dualcastConfig.cmake.in).
// (#pragma message is a note in g++ and a warning that -Werror leaves alone in clang.)
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(__AVX2__) &&                              \
    !defined(DUALCAST_NO_SIMD_WARNING)
#pragma message("dualcast: compiled without AVX2, the kernels run on narrower SIMD vectors "       \
                "(slower): compile with -march=native (the CMake target dualcast::native) or "     \
                "-mavx2, or define DUALCAST_NO_SIMD_WARNING to silence this note")
#endif
#if defined(__AVX512F__)
inline constexpr int simd_bytes = 64;
#elif defined(__AVX__)
inline constexpr int simd_bytes = 32;
#else
inline constexpr int simd_bytes = 16;
#endif
template <class T> inline constexpr int native_width = simd_bytes / static_cast<int>(sizeof(T));

template <class T, int W> struct mask {
  using int_t = typename detail::same_size_int<T>::type;
  typedef int_t vec_t __attribute__((vector_size(sizeof(int_t) * W)));
  vec_t v; // each lane all ones (true) or all zeros (false)

  friend mask operator&&(mask a, mask b) { return {a.v & b.v}; }
  friend mask operator||(mask a, mask b) { return {a.v | b.v}; }
  friend mask operator!(mask a) { return {~a.v}; }
  friend mask operator&(mask a, mask b) { return {a.v & b.v}; }
  friend mask operator|(mask a, mask b) { return {a.v | b.v}; }
  friend mask operator^(mask a, mask b) { return {a.v ^ b.v}; }
  friend mask operator==(mask a, mask b) { return {a.v == b.v}; }
  friend mask operator!=(mask a, mask b) { return {a.v != b.v}; }
  friend mask operator&&(mask a, bool b) { return b ? a : mask{vec_t{} & 0}; }
  friend mask operator&&(bool b, mask a) { return a && b; }
  friend mask operator||(mask a, bool b) { return b ? mask{~(vec_t{} & 0)} : a; }
  friend mask operator||(bool b, mask a) { return a || b; }

  // One bit per lane (lane i -> bit i): a single instruction on x86 (a lane-by-lane loop would
  // cost a branch per lane in every branch of a kernel and every checked chain rule).
  std::uint32_t bits() const {
#if defined(__AVX512F__)
    if constexpr (sizeof(vec_t) == 64) {
      auto x = __builtin_bit_cast(__m512i, v);
      if constexpr (sizeof(int_t) == 4)
        return _mm512_test_epi32_mask(x, x);
      else
        return _mm512_test_epi64_mask(x, x);
    }
#endif
#if defined(__AVX__)
    if constexpr (sizeof(vec_t) == 32) {
      if constexpr (sizeof(int_t) == 4)
        return std::uint32_t(_mm256_movemask_ps(__builtin_bit_cast(__m256, v)));
      else
        return std::uint32_t(_mm256_movemask_pd(__builtin_bit_cast(__m256d, v)));
    }
#endif
#if defined(__SSE2__)
    if constexpr (sizeof(vec_t) == 16) {
      if constexpr (sizeof(int_t) == 4)
        return std::uint32_t(_mm_movemask_ps(__builtin_bit_cast(__m128, v)));
      else
        return std::uint32_t(_mm_movemask_pd(__builtin_bit_cast(__m128d, v)));
    }
#endif
    std::uint32_t b = 0;
    for (int i = 0; i < W; ++i)
      b |= v[i] ? (std::uint32_t(1) << i) : 0u;
    return b;
  }
  static_assert(W <= 32, "dualcast: a mask holds at most 32 lanes");
  bool all() const { return bits() == all_bits; }
  bool any() const { return bits() != 0; }
  // Branching on a mask: the truth of the running path's lanes, splitting the path where they
  // disagree (detail::lane_paths).
  explicit operator bool() const { return detail::current_lane_paths().take(bits(), all_bits); }
  static constexpr std::uint32_t all_bits = W == 32 ? ~0u : (std::uint32_t(1) << W) - 1;
  // The mask whose lane i is set iff bit i of b is.
  static mask from_bits(std::uint32_t b) {
    mask m;
    for (int i = 0; i < W; ++i)
      m.v[i] = (b >> i) & 1u ? int_t(-1) : int_t(0);
    return m;
  }
};

template <class T, int W> struct batch {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "dualcast: batch<T, W> holds float or double");
  static_assert(W >= 1 && (W & (W - 1)) == 0, "dualcast: batch width must be a power of two");
  typedef T vec_t __attribute__((vector_size(sizeof(T) * W)));
  using value_type = T;
  static constexpr int size = W;
  vec_t v;

  batch() = default;
  batch(vec_t x) : v(x) {} // NOLINT(google-explicit-constructor)
  template <class S>
  requires std::is_arithmetic_v<S> batch(S s)
      : v(static_cast<T>(s) - vec_t{}) {} // NOLINT(google-explicit-constructor): s - 0 keeps -0

  // W numbers at p, aligned as T only. Through a vector type, not memcpy: GCC expands a 64-byte
  // memcpy as two 32-byte moves (its preferred vector width), and a kernel's results then went
  // from registers to the stack and out in halves (the HM-LSTM update 10 % slower).
  typedef T unaligned_vec_t
      __attribute__((vector_size(sizeof(T) * W), aligned(sizeof(T)), may_alias));
  static batch load(T const *p) {
    batch r;
    r.v = *reinterpret_cast<unaligned_vec_t const *>(p);
    return r;
  }
  void store(T *p) const { *reinterpret_cast<unaligned_vec_t *>(p) = v; }
  T operator[](int i) const { return v[i]; }
  void set(int i, T x) { v[i] = x; }
  // A batch holds W numbers and does not convert to one: a cast to int or double in a kernel's
  // lambda lands here with a message naming the fix.
  template <class S>
  requires std::is_arithmetic_v<S>
  explicit operator S() const {
    static_assert(sizeof(S) == 0,
                  "dualcast: a SIMD batch cannot be converted to a single number (a cast to int "
                  "or double in a kernel's lambda?): run such a lambda one element at a time with "
                  "dualcast::kernel(f, dualcast::per_element)");
    return S{};
  }

  batch &operator+=(batch o) { return v += o.v, *this; }
  batch &operator-=(batch o) { return v -= o.v, *this; }
  batch &operator*=(batch o) { return v *= o.v, *this; }
  batch &operator/=(batch o) { return v /= o.v, *this; }

  friend batch operator+(batch a) { return a; }
  friend batch operator-(batch a) { return {-a.v}; }
  friend batch operator+(batch a, batch b) { return {a.v + b.v}; }
  friend batch operator-(batch a, batch b) { return {a.v - b.v}; }
  friend batch operator*(batch a, batch b) { return {a.v * b.v}; }
  friend batch operator/(batch a, batch b) { return {a.v / b.v}; }
  friend mask<T, W> operator<(batch a, batch b) { return {a.v < b.v}; }
  friend mask<T, W> operator<=(batch a, batch b) { return {a.v <= b.v}; }
  friend mask<T, W> operator>(batch a, batch b) { return {a.v > b.v}; }
  friend mask<T, W> operator>=(batch a, batch b) { return {a.v >= b.v}; }
  friend mask<T, W> operator==(batch a, batch b) { return {a.v == b.v}; }
  friend mask<T, W> operator!=(batch a, batch b) { return {a.v != b.v}; }
};

template <class T> struct is_batch : std::false_type {};
template <class T, int W> struct is_batch<batch<T, W>> : std::true_type {};
template <class T> inline constexpr bool is_batch_v = is_batch<std::remove_cvref_t<T>>::value;
template <class T> struct is_mask : std::false_type {};
template <class T, int W> struct is_mask<mask<T, W>> : std::true_type {};

// Mixed batch/scalar operators (the scalar is broadcast to every lane).
#define DUALCAST_DETAIL_BATCH_SCALAR(op)                                                           \
  template <class T, int W, class S>                                                               \
  requires std::is_arithmetic_v<S>                                                                 \
  inline auto operator op(batch<T, W> a, S s) { return a op batch<T, W>(s); }                      \
  template <class T, int W, class S>                                                               \
  requires std::is_arithmetic_v<S>                                                                 \
  inline auto operator op(S s, batch<T, W> a) { return batch<T, W>(s) op a; }
DUALCAST_DETAIL_BATCH_SCALAR(+)
DUALCAST_DETAIL_BATCH_SCALAR(-)
DUALCAST_DETAIL_BATCH_SCALAR(*)
DUALCAST_DETAIL_BATCH_SCALAR(/)
DUALCAST_DETAIL_BATCH_SCALAR(<)
DUALCAST_DETAIL_BATCH_SCALAR(<=)
DUALCAST_DETAIL_BATCH_SCALAR(>)
DUALCAST_DETAIL_BATCH_SCALAR(>=)
DUALCAST_DETAIL_BATCH_SCALAR(==)
DUALCAST_DETAIL_BATCH_SCALAR(!=)
#undef DUALCAST_DETAIL_BATCH_SCALAR

} // namespace dualcast
#endif // DUALCAST_HAS_SIMD
