// dualcast/ops/stencil.hpp: stencils over 1-, 2- and 3-D arrays with a function of your own over
// the neighbourhood, on tape variables and on tensors.
//
//   constexpr auto five = dualcast::offsets({0, 0}, {-1, 0}, {1, 0}, {0, -1}, {0, 1});
//   auto heat = [](auto c, auto n, auto s, auto w, auto e) {
//     return c + 0.1 * (n + s + w + e - 4 * c);
//   };
//   auto u2 = dualcast::stencil(u, five, heat, dualcast::boundary::periodic); // same shape as u
//
// y[p] = f(x[p + o_0], ..., x[p + o_(K-1)]) for every point p of x, whose rank must be D, the
// length of each offset (1, 2 or 3). The number of offsets K and D are compile-time (from the
// braced lists given to dualcast::offsets); the offsets' values are ordinary ints (constexpr
// where you like). f is generic: it is called on T for values and on dualcast::dual<T, K> for its
// partials, so write it with dualcast's math functions; it may be nonlinear, and must be
// trivially copyable (a lambda capturing values, not references). A neighbour outside the array:
//   boundary::zero      the constant 0 (no gradient flows to anything);
//   boundary::clamp     the nearest element along each axis (the edge element is repeated);
//   boundary::periodic  the array wraps around along each axis.
// Extents smaller than the stencil's reach are fine in every mode (clamp and periodic may then
// map several slots of one neighbourhood to the same element; the gradient sums them).
//
// Adjoint: the transposed stencil as a GATHER (no atomics, each thread owns the gradient elements
// it writes): xbar[i] = sum over slots k, over the points j with map(j + o_k) == i, of
// ybar[j] * d f(neighbourhood of j) / d slot k. With periodic and zero boundaries that is the
// mirrored stencil j = i - o_k (at most one point per slot); with clamp an edge element also
// receives from every point whose clamped neighbour it is (along each axis the points j form a
// range, so a corner receives from a box). Backward first evaluates f once on dual<T, K> at each
// point with ybar != 0 and stores ybar * the K partials (N * K values, one plane per slot, freed
// after), then gathers; with policy::recompute the gather evaluates each partial where it reads
// it instead (f K times per point on dual<T, 1>, nothing stored: faster for the cheapest f).
// A term ybar * partial is 0 where ybar is 0.
//
// Work: forward one f per point, backward one f on dual<T, K> per point plus the gather (K
// additions per interior point); rows of the last axis run in parallel (row operations: a thread
// per row on the CPU, a warp per row on CUDA whose lanes take neighbouring points -- a thread per
// row read 17 GB/s on an H200 at 4096 x 4096); every result is the same bits at any number of
// threads, and on one lane or a warp (each element is computed by one thread in a fixed order).
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/policy.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace dualcast {

// What a stencil reads outside the array (see the file comment).
enum class boundary { zero, clamp, periodic };

// K offsets of D coordinates each (built with dualcast::offsets).
template <int D, int K> struct stencil_offsets {
  static_assert(D >= 1 && D <= 3, "dualcast::stencil: 1-, 2- or 3-D offsets");
  static_assert(K >= 1, "dualcast::stencil: at least one offset");
  int o[K][D];
};

// dualcast::offsets({-1}, {0}, {1}): the offsets of a stencil, each a braced list of D ints.
template <std::size_t D0, std::size_t... D>
constexpr stencil_offsets<int(D0), int(1 + sizeof...(D))> offsets(int const (&first)[D0],
                                                                  int const (&...rest)[D]) {
  static_assert(((D == D0) && ...), "dualcast::offsets: every offset has the same length");
  stencil_offsets<int(D0), int(1 + sizeof...(D))> r{};
  for (std::size_t d = 0; d < D0; ++d)
    r.o[0][d] = first[d];
  int k = 1;
  auto one = [&](auto const &o) {
    for (std::size_t d = 0; d < D0; ++d)
      r.o[k][d] = o[d];
    ++k;
  };
  (one(rest), ...);
  return r;
}

namespace detail {

// c brought into [0, n) periodically (n > 0). Steps of n, as many as the offset has periods
// (one, unless an axis is shorter than the stencil's reach), instead of a 64-bit modulo: that is a
// call on CUDA, whose saved registers ptxas reported as spills in the float 5-point stencil.
DUALCAST_HD inline index_t stencil_wrap(index_t c, index_t n) {
  while (c < 0)
    c += n;
  while (c >= n)
    c -= n;
  return c;
}
// Where coordinate c of an axis of n elements reads: c itself inside, else by the boundary mode
// (-1: outside, the constant 0).
DUALCAST_HD inline index_t stencil_map(index_t c, index_t n, boundary b) {
  if (c >= 0 && c < n)
    return c;
  if (b == boundary::zero)
    return -1;
  if (b == boundary::clamp)
    return c < 0 ? 0 : n - 1;
  return stencil_wrap(c, n);
}

// The points j in [0, n) of an axis with stencil_map(j + o) == i, as the range [lo, hi] (empty
// when lo > hi): one point (or none) inside, a range at a clamped edge, one point periodic.
DUALCAST_HD inline void stencil_sources(index_t i, index_t o, index_t n, boundary b, index_t &lo,
                                        index_t &hi) {
  if (b == boundary::periodic) {
    index_t j = (i - o) % n; // (a modulo here: stencil_wrap's loops made ptxas spill the gather)
    lo = hi = j < 0 ? j + n : j;
    return;
  }
  lo = hi = i - o;
  if (b == boundary::clamp) {
    if (i == 0)
      lo = 0; // every j with j + o <= 0
    if (i == n - 1)
      hi = n - 1; // every j with j + o >= n - 1
  }
  lo = lo < 0 ? 0 : lo;
  hi = hi > n - 1 ? n - 1 : hi;
}

// The array as 3-D (leading extents 1, leading offsets 0) and the stencil.
//
// Most points are interior: every neighbour lies inside the array, so slot k reads the flat index
// p + flat[k] without any boundary mapping. The passes below run those points with the flat
// offsets and only the rim through neighbour() / stencil_sources() (the same values in the same
// order: the same bits). [in_lo, in_hi) per axis: the forward interior (every p + o_k inside);
// [g_lo, g_hi): the gather's interior (every mirrored source p - o_k inside, and the only one);
// [r_lo, r_hi): within it, the points whose sources are all forward-interior too (the gather
// that recomputes the partials reads their neighbourhoods at flat offsets).
template <int K> struct stencil_geometry {
  index_t ext[3];
  index_t off[K][3];
  boundary b;
  index_t flat[K];
  index_t in_lo[3], in_hi[3], g_lo[3], g_hi[3], r_lo[3], r_hi[3];
  DUALCAST_HD index_t points() const { return ext[0] * ext[1] * ext[2]; }
  // The flat index that slot k of point (p0, p1, p2) reads, -1 for the constant 0.
  DUALCAST_HD index_t neighbour(index_t p0, index_t p1, index_t p2, int k) const {
    index_t const q0 = stencil_map(p0 + off[k][0], ext[0], b);
    index_t const q1 = stencil_map(p1 + off[k][1], ext[1], b);
    index_t const q2 = stencil_map(p2 + off[k][2], ext[2], b);
    return q0 < 0 || q1 < 0 || q2 < 0 ? -1 : (q0 * ext[1] + q1) * ext[2] + q2;
  }
  // f(j0, j1, j2) for each point j whose slot k reads point (i0, i1, i2) -- the gather's sources
  // on the rim: one point, none (boundary zero) or, under clamp at an edge, a box -- in order.
  template <class F>
  DUALCAST_HD void each_source(index_t i0, index_t i1, index_t i2, int k, F &&f) const {
    index_t lo0, hi0, lo1, hi1, lo2, hi2;
    stencil_sources(i0, off[k][0], ext[0], b, lo0, hi0);
    stencil_sources(i1, off[k][1], ext[1], b, lo1, hi1);
    stencil_sources(i2, off[k][2], ext[2], b, lo2, hi2);
    for (index_t j0 = lo0; j0 <= hi0; ++j0)
      for (index_t j1 = lo1; j1 <= hi1; ++j1)
        for (index_t j2 = lo2; j2 <= hi2; ++j2)
          f(j0, j1, j2);
  }
  // The interior [a, b) of the row at leading coordinates (p0, p1) within box [lo, hi) (empty
  // when the row itself is not inside the box).
  DUALCAST_HD static void row_interior(index_t p0, index_t p1, index_t const *lo, index_t const *hi,
                                       index_t &a, index_t &b) {
    bool const inside = p0 >= lo[0] && p0 < hi[0] && p1 >= lo[1] && p1 < hi[1];
    a = inside ? lo[2] : 0;
    b = inside ? hi[2] : 0;
  }
};

// Forced inline: a call per point keeps the passes from vectorizing; with g++ a user TU that
// instantiated an identical function elsewhere (-fipa-icf folds them) got the call, and the
// partials pass ran 50x slower (bench/primitives, 2-D: 1.4 s instead of 27 ms).
template <class R, class V, class F, std::size_t... I>
DUALCAST_HD DUALCAST_FORCEINLINE R stencil_call(F const &f, V const *v, std::index_sequence<I...>) {
  return R(f(v[I]...));
}
// f on the dual numbers slot(0), ..., slot(K - 1) (a neighbour's value, slot k seeded with
// partial k), made in the call itself: an array of them on the stack (K duals of K + 1 numbers)
// was not broken up into registers by g++, and its mixed-width stores and loads stalled the
// partials pass (3-D, 7 slots: interior and rim).
template <class D, class F, class Slot, std::size_t... I>
DUALCAST_HD DUALCAST_FORCEINLINE D stencil_call_slots(F const &f, Slot const &slot,
                                                      std::index_sequence<I...>) {
  return D(f(slot(int(I))...));
}

// Row r of a pass (the last axis at fixed leading coordinates; its interior from the box
// [lo, hi)): one lane runs the rim before the interior, the interior as one loop (it vectorizes
// on the CPU) and the rim after; a warp's lanes take every count()-th point (neighbouring lanes,
// neighbouring points). Each point is computed the same way in both: the same bits.
template <class Pass, class Lanes>
DUALCAST_HD DUALCAST_FORCEINLINE void stencil_row(Pass const &pass, index_t r, Lanes const &lanes,
                                                  index_t const *lo, index_t const *hi) {
  index_t const n2 = pass.geo.ext[2];
  index_t const p0 = r / pass.geo.ext[1], p1 = r % pass.geo.ext[1];
  index_t a, b;
  pass.geo.row_interior(p0, p1, lo, hi, a, b);
  if constexpr (Lanes::count() > 1) {
    for (index_t p2 = lanes.lane(); p2 < n2; p2 += Lanes::count()) {
      if (p2 >= a && p2 < b)
        pass.interior(r * n2 + p2);
      else
        pass.rim(r, p0, p1, p2, p2 + 1);
    }
  } else {
    pass.rim(r, p0, p1, 0, a);
    for (index_t j = r * n2 + a, end = r * n2 + b; j < end; ++j)
      pass.interior(j);
    pass.rim(r, p0, p1, b, n2);
  }
}

// Forward over row r (the last axis at fixed leading coordinates).
template <class T, int K, class F> struct stencil_forward {
  T const *x;
  T *y;
  stencil_geometry<K> geo;
  F f;
  DUALCAST_HD void rim(index_t r, index_t p0, index_t p1, index_t from, index_t to) const {
    for (index_t p2 = from; p2 < to; ++p2) {
      T v[K];
      for (int k = 0; k < K; ++k) {
        index_t const j = geo.neighbour(p0, p1, p2, k);
        v[k] = j < 0 ? T(0) : x[j];
      }
      y[r * geo.ext[2] + p2] = stencil_call<T>(f, v, std::make_index_sequence<std::size_t(K)>{});
    }
  }
  DUALCAST_HD DUALCAST_FORCEINLINE void interior(index_t j) const {
    T v[K];
    for (int k = 0; k < K; ++k)
      v[k] = x[j + geo.flat[k]];
    y[j] = stencil_call<T>(f, v, std::make_index_sequence<std::size_t(K)>{});
  }
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    stencil_row(*this, r, lanes, geo.in_lo, geo.in_hi);
  }
};

// Backward, first pass over row r: c[k * N + j] = ybar[j] * d f(neighbourhood of j) / d slot k,
// N = the number of points: one plane per slot, so that the gather reads K contiguous runs (with
// the K partials of a point side by side it read every cache line of c K times; 3-D: 7x the
// traffic).
template <class T, int K, class F> struct stencil_partials {
  T const *x, *gy;
  T *c;
  stencil_geometry<K> geo;
  F f;
  using D = dual<T, K>;
  // The partials of point j: f on its slots' duals (slot(k), stencil_call_slots), times ybar.
  template <class Slot>
  DUALCAST_HD DUALCAST_FORCEINLINE void store(index_t j, T ybar, Slot const &slot) const {
    D const res = stencil_call_slots<D>(f, slot, std::make_index_sequence<std::size_t(K)>{});
    for (int k = 0; k < K; ++k)
      c[k * geo.points() + j] = times_cotangent(ybar, res.d[k]);
  }
  DUALCAST_HD void zero(index_t j) const {
    for (int k = 0; k < K; ++k)
      c[k * geo.points() + j] = T(0);
  }
  DUALCAST_HD void rim(index_t r, index_t p0, index_t p1, index_t from, index_t to) const {
    for (index_t p2 = from; p2 < to; ++p2) {
      index_t const j = r * geo.ext[2] + p2;
      T const ybar = gy[j];
      if (ybar == T(0)) {
        zero(j);
        continue;
      }
      store(j, ybar, [&](int k) {
        index_t const q = geo.neighbour(p0, p1, p2, k);
        return q < 0 ? D(T(0)) : D::variable(x[q], k);
      });
    }
  }
  DUALCAST_HD DUALCAST_FORCEINLINE void interior(index_t j) const {
    T const ybar = gy[j];
    if (ybar == T(0)) {
      zero(j);
      return;
    }
    store(j, ybar, [&](int k) { return D::variable(x[j + geo.flat[k]], k); });
  }
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    stencil_row(*this, r, lanes, geo.in_lo, geo.in_hi);
  }
};

// Backward, second pass over row r of the gradient: the gather with the mirrored stencil.
template <class T, int K> struct stencil_gather {
  T const *c;
  T *gx;
  stencil_geometry<K> geo;
  DUALCAST_HD DUALCAST_FORCEINLINE void interior(index_t i) const {
    T acc = T(0);
    for (int k = 0; k < K; ++k) // the one source of slot k: i - o_k
      acc += c[k * geo.points() + i - geo.flat[k]];
    gx[i] = acc;
  }
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    stencil_row(*this, r, lanes, geo.g_lo, geo.g_hi);
  }
  DUALCAST_HD void rim(index_t r, index_t i0, index_t i1, index_t from, index_t to) const {
    index_t const plane = geo.points();
    for (index_t i2 = from; i2 < to; ++i2) {
      T acc = T(0);
      T const *ck = c; // slot k's plane
                       // (not unrolled on CUDA: with the planes' offsets ptxas spilled the 3-D rim)
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int k = 0; k < K; ++k, ck += plane)
        geo.each_source(i0, i1, i2, k, [&](index_t j0, index_t j1, index_t j2) {
          acc += ck[(j0 * geo.ext[1] + j1) * geo.ext[2] + j2];
        });
      gx[r * geo.ext[2] + i2] = acc;
    }
  }
};

// Backward in one pass, the partials recomputed (policy::recompute): the gather above with each
// stored partial c[k][j] = ybar[j] * d f(neighbourhood of j) / d slot k evaluated where it is
// read, on dual<T, 1> seeded in slot k alone -- K evaluations of f per point instead of one on
// dual<T, K>, and no N * K array of partials written and read back. The same terms summed in the
// same order as the stored gather; a term can still differ from the stored one by an ulp where
// the compiler contracts a * b + c into a fused multiply-add in one form and not in the other
// (g++ does at -O3 with -march=native).
template <class T, int K, class F> struct stencil_gather_recompute {
  T const *x, *gy;
  T *gx;
  stencil_geometry<K> geo;
  F f;
  using D1 = dual<T, 1>;
  // ybar[j] times the partial for slot k at point j, whose slot m is slot(m) (0 where ybar[j] is
  // 0, whatever the partial: as times_cotangent).
  template <class Slot> DUALCAST_HD DUALCAST_FORCEINLINE T term(index_t j, Slot const &slot) const {
    D1 const res = stencil_call_slots<D1>(f, slot, std::make_index_sequence<std::size_t(K)>{});
    return times_cotangent(gy[j], res.d[0]);
  }
  // Slot by slot with k a constant (an index sequence, not a loop): as a loop, g++ vectorised it
  // instead of the loop over points when f had internal linkage (2-D heat step 20 -> 49 ms).
  DUALCAST_HD DUALCAST_FORCEINLINE void interior(index_t i) const {
    T acc = T(0);
    each_slot(std::make_index_sequence<std::size_t(K)>{}, [&](auto kc) {
      constexpr int k = decltype(kc)::value;
      index_t const j = i - geo.flat[k]; // source i - o_k, itself forward-interior
      acc += term(j, [&](int m) {
        T const v = x[j + geo.flat[m]];
        return m == k ? D1::variable(v, 0) : D1(v);
      });
    });
    gx[i] = acc;
  }
  template <std::size_t... k, class Step>
  DUALCAST_HD DUALCAST_FORCEINLINE static void each_slot(std::index_sequence<k...>, Step &&step) {
    (step(std::integral_constant<int, int(k)>{}), ...);
  }
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    stencil_row(*this, r, lanes, geo.r_lo, geo.r_hi);
  }
  DUALCAST_HD void rim(index_t r, index_t i0, index_t i1, index_t from, index_t to) const {
    for (index_t i2 = from; i2 < to; ++i2) {
      T acc = T(0);
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int k = 0; k < K; ++k)
        geo.each_source(i0, i1, i2, k, [&](index_t j0, index_t j1, index_t j2) {
          acc += term((j0 * geo.ext[1] + j1) * geo.ext[2] + j2, [&](int m) {
            index_t const q = geo.neighbour(j0, j1, j2, m);
            return q < 0 ? D1(T(0)) : m == k ? D1::variable(x[q], 0) : D1(x[q]);
          });
        });
      gx[r * geo.ext[2] + i2] = acc;
    }
  }
};

// Whether backward recomputes the partials in the gather (policy::recompute) or stores them
// first (policy::store). automatic stores: recomputing does K evaluations of f per point where
// storing does one (on K partials), which pays for cheap f only -- float32, 2 threads, store /
// recompute: the 5-point heat step on 4096^2 33.0 / 7.6 ms, the 7-point one on 256^3 51.2 / 50.7,
// but a 5-point total variation with sqrt and tanh on 2048^2 56 / 201 ms.
inline bool stencil_recomputes(policy_kind p) { return p == policy_kind::recompute; }

template <int D, int K>
stencil_geometry<K> make_stencil_geometry(shape const &s, stencil_offsets<D, K> const &offs,
                                          boundary b) {
  if (s.rank != D)
    throw shape_error("dualcast::stencil: " + std::to_string(D) +
                      "-D offsets for an array of shape " + to_string(s));
  stencil_geometry<K> g{};
  for (int a = 0; a < 3; ++a)
    g.ext[a] = a < 3 - D ? 1 : s.ext[a - (3 - D)];
  for (int k = 0; k < K; ++k)
    for (int a = 0; a < 3; ++a)
      g.off[k][a] = a < 3 - D ? 0 : offs.o[k][a - (3 - D)];
  g.b = b;
  for (int k = 0; k < K; ++k)
    g.flat[k] = (g.off[k][0] * g.ext[1] + g.off[k][1]) * g.ext[2] + g.off[k][2];
  for (int a = 0; a < 3; ++a) {
    index_t lo = 0, hi = 0; // the least and greatest offset along axis a
    for (int k = 0; k < K; ++k) {
      lo = k == 0 || g.off[k][a] < lo ? g.off[k][a] : lo;
      hi = k == 0 || g.off[k][a] > hi ? g.off[k][a] : hi;
    }
    index_t const n = g.ext[a];
    auto box = [n](index_t from, index_t to, index_t &l, index_t &h) {
      l = from < 0 ? 0 : (from > n ? n : from);
      h = to > n ? n : (to < l ? l : to);
    };
    box(-lo, n - hi, g.in_lo[a], g.in_hi[a]); // p + o in [0, n) for every o
    // Gather: p - o in [0, n) for every o; clamped edges also receive from the points beyond
    // them, so with clamp (and any offset along the axis) the edge elements stay on the rim.
    index_t const edge = b == boundary::clamp && (lo != 0 || hi != 0) ? 1 : 0;
    box(std::max(hi, edge), std::min(n + lo, n - edge), g.g_lo[a], g.g_hi[a]);
    // p - o_k in [-lo, n - hi) for every k as well: p in [hi - lo, n - hi + lo).
    box(std::max(g.g_lo[a], hi - lo), std::min(g.g_hi[a], n - hi + lo), g.r_lo[a], g.r_hi[a]);
  }
  return g;
}

template <class Ex, class T, int K, class F>
tensor<T> stencil_run(Ex const &ex, tensor<T> const &xc, stencil_geometry<K> const &geo,
                      F const &f) {
  auto y = tensor<T>::empty(xc.dims(), xc.dev());
  index_t const rows = geo.ext[0] * geo.ext[1];
  if (xc.size() > 0)
    parallel_for_rows(ex, rows, geo.ext[2] * K,
                      stencil_forward<T, K, F>{xc.data(), y.raw_data(), geo, f});
  return y;
}

} // namespace detail

// The stencil of a tensor: its value, on the tensor's device.
template <class T, int D, int K, class F>
tensor<T> stencil(tensor<T> const &x, stencil_offsets<D, K> const &offs, F const &f,
                  boundary b = boundary::zero) {
  auto const geo = detail::make_stencil_geometry(x.dims(), offs, b);
  return detail::on_device(
      "dualcast::stencil", x.dev(), detail::ambient_cpu(),
      [&](auto const &ex) { return detail::stencil_run(ex, x.contiguous(), geo, f); });
}

// The stencil of a tape variable or lazy expression. partials: how backward gets f's partials
// (see the file comment): policy::store (and automatic, the default) evaluates f once per point
// on dual<T, K> and keeps the N * K partials for the gather; policy::recompute evaluates them in
// the gather, K times per point on dual<T, 1>, and keeps nothing (detail::stencil_recomputes).
template <var_like X, int D, int K, class F>
auto stencil(X const &x, stencil_offsets<D, K> const &offs, F const &f, boundary b = boundary::zero,
             policy_kind partials = policy_kind::automatic) {
  DUALCAST_REFUSE_FLOAT16("stencil", X);
  static_assert(detail::plain_operand<X>(),
                "dualcast::stencil: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  using T = typename detail::var_of_t<X>::value_type;
  static_assert(std::is_trivially_copyable_v<F>,
                "dualcast::stencil: the function must be trivially copyable (a lambda capturing "
                "values, not references)");
  auto const &v = detail::as_var(x);
  auto const geo = detail::make_stencil_geometry(v.dims(), offs, b);
  return custom_op(
      "stencil",
      [&](auto const &ex, auto &ctx, tensor<T> const &xv) {
        tensor<T> xc = xv.contiguous();
        ctx.save(xc, "input");
        return detail::stencil_run(ex, xc, geo, f);
      },
      [geo, f, partials](auto const &ex, auto const &ctx, auto &g) {
        tensor<T> const &xc = ctx.saved(0);
        if (!g.needs(0) || xc.size() == 0)
          return;
        tensor<T> gy = g.out(0).contiguous();
        device const dev = gy.dev();
        index_t const rows = geo.ext[0] * geo.ext[1];
        if (detail::stencil_recomputes(partials)) {
          auto gx = tensor<T>::empty(xc.dims(), dev);
          detail::parallel_for_rows(ex, rows, geo.ext[2] * K * K * 4,
                                    detail::stencil_gather_recompute<T, K, F>{
                                        xc.data(), gy.data(), gx.raw_data(), geo, f});
          g.add(0, std::move(gx));
          return;
        }
        auto c = tensor<T>::empty({xc.size() * K}, dev);
        detail::parallel_for_rows(
            ex, rows, geo.ext[2] * K * 4,
            detail::stencil_partials<T, K, F>{xc.data(), gy.data(), c.raw_data(), geo, f});
        auto gx = tensor<T>::empty(xc.dims(), dev);
        detail::parallel_for_rows(ex, rows, geo.ext[2] * K,
                                  detail::stencil_gather<T, K>{c.data(), gx.raw_data(), geo});
        g.add(0, std::move(gx));
      },
      v);
}

} // namespace dualcast
