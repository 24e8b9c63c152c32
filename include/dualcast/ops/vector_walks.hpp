// dualcast/ops/vector_walks.hpp: a CPU pass of a scan walking W contiguous pieces at once, one
// piece per lane of a vector (W = 16 floats with AVX-512). The lockstep walks of lane_scan.hpp
// overlap 4 or 8 dependency chains in scalar registers; here each step is one vector operation
// for W chains, and the loads and stores move W elements of a piece at a time: the pieces' next
// W elements are loaded as W vectors and transposed in registers (log2 W rounds of W
// shuffles), so that vector e holds element e of every piece. Every lane does what the
// sequential loop does for its piece, in the same order: the same bits.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/numbers/simd.hpp>

namespace dualcast::detail {
// Lanes of a native vector of T for the passes' vector walks (1: no vectors, under nvcc).
#if DUALCAST_HAS_SIMD
template <class T> inline constexpr int simd_lanes = native_width<T>;
#else
template <class T> inline constexpr int simd_lanes = 1;
#endif
} // namespace dualcast::detail

#if DUALCAST_HAS_SIMD

#include <utility>

namespace dualcast::detail {

// Walks per vector for a pass over `Arrays` arrays: the native width (16 floats, 8 doubles with
// AVX-512), at most 32 streams in all. Each walk is a stream of its own per array, and the core's
// prefetcher follows about 32: cumprod's backward (4 arrays) walking 16 pieces per vector took
// 12.7 ms against 8.9 for 4 scalar walks in lockstep, 8 per vector 7.4-7.6 ms (10^7 floats, 2
// threads; before the prefetch below and the constant piece stride of the passes in scan.hpp).
template <class T, int Arrays>
inline constexpr int walks_in_vector =
    native_width<T> < 32 / Arrays ? native_width<T> : 32 / Arrays;
// The walks' loads run this many elements behind a software prefetch (512 bytes): 2 threads
// walking 16 or 8 pieces each outrun the hardware's prefetcher (cumsum backward 3.9-4.2 -> 3.4 ms,
// cummin 10.8 -> 8.6-8.9 ms with it).
template <class T> inline constexpr index_t prefetch_ahead = 512 / sizeof(T);

// A walk vector is a SIMD batch's vector (numbers/simd.hpp), loaded and stored as batches are.
template <class T, int W> using walk_vector = typename batch<T, W>::vec_t;

template <int W, class T> inline walk_vector<T, W> load_walk(T const *p) {
  return batch<T, W>::load(p).v;
}
template <class T, class V> inline void store_walk(T *p, V v) {
  batch<T, int(sizeof(V) / sizeof(T))>(v).store(p);
}

// The lanes of a and b interleaved: the lower halves (Hi false) or the upper halves.
template <bool Hi, int W, class V, int... I>
inline V interleave(V a, V b, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(a, b, ((I % 2 ? W : 0) + (Hi ? W / 2 : 0) + I / 2)...);
}
// r[i][j] becomes r[j][i]: log2 W rounds of perfect shuffles (round: row 2i and 2i + 1 the
// interleaved lower and upper halves of rows i and i + W / 2).
template <int W, class V> inline void transpose_walks(V (&r)[W]) {
  for (int round = 1; round < W; round *= 2) {
    V t[W];
    for (int i = 0; i < W / 2; ++i) {
      t[2 * i] = interleave<false, W>(r[i], r[i + W / 2], std::make_integer_sequence<int, W>{});
      t[2 * i + 1] = interleave<true, W>(r[i], r[i + W / 2], std::make_integer_sequence<int, W>{});
    }
    for (int i = 0; i < W; ++i)
      r[i] = t[i];
  }
}

// W pieces `stride` elements apart, from p in each: r[e] = element e of every piece (lane g:
// piece g), and its inverse, storing r[e] as element e of every piece.
template <int W, class T>
inline void load_transposed(walk_vector<T, W> (&r)[W], T const *p, index_t stride) {
  for (int g = 0; g < W; ++g)
    r[g] = load_walk<W>(p + g * stride);
  transpose_walks<W>(r);
}
template <int W, class T>
inline void store_transposed(T *p, index_t stride, walk_vector<T, W> (&r)[W]) {
  transpose_walks<W>(r);
  for (int g = 0; g < W; ++g)
    store_walk(p + g * stride, r[g]);
}
// A prefetch of p in each of W pieces `stride` elements apart.
template <int W, class T> inline void prefetch_walks(T const *p, index_t stride) {
  for (int g = 0; g < W; ++g)
    __builtin_prefetch(p + g * stride);
}

// ybar * partial, 0 where ybar is 0, lane by lane (times_cotangent).
template <class V> inline V times_cotangent_lanes(V ybar, V partial) {
  return ybar == V{} ? V{} : ybar * partial;
}

} // namespace dualcast::detail

#endif
