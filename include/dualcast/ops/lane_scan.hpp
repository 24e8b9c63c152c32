// dualcast/ops/lane_scan.hpp: how the passes of the parallel primitives (ops/prod.hpp,
// ops/reduce_op.hpp, ops/scan.hpp, ops/linear_recurrence.hpp) walk a block or a piece: as row
// operations over lanes -- one lane on the CPU (the sequential loop), a CUDA warp's 32 lanes on
// the GPU, which then read 32 neighbouring elements at a time and scan them over the lanes in
// order (one thread per block of 4096 read 40-65 GB/s on an H200). lane_scan is that walk; the
// affine maps are what the recurrences compose over the lanes.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>

#include <type_traits>
#include <utility>

namespace dualcast::detail {

// + and * as function objects for device code (lanes.reduce, lane_scan).
template <class T> struct plus_op {
  DUALCAST_HD T operator()(T a, T b) const { return a + b; }
};
template <class T> struct times_op {
  DUALCAST_HD T operator()(T a, T b) const { return a * b; }
};

// Affine maps of a carry c, composed on a warp (lane_scan) by the backward recurrences of the
// scans and of linear_recurrence: c -> a c + b with the adjoints' zero rule (a 0 carry stays 0
// whatever a is), and `later after earlier`.
template <class T> struct affine {
  T a, b;
  DUALCAST_HD T operator()(T c) const { return times_cotangent(c, a) + b; }
};
template <class T> struct then_affine {
  DUALCAST_HD affine<T> operator()(affine<T> e, affine<T> l) const {
    return {l.a * e.a, times_cotangent(e.b, l.a) + l.b};
  }
};
// The same without the zero rule, for values (linear_recurrence's forward: h -> a h + b).
template <class T> struct linear {
  T a, b;
  DUALCAST_HD T operator()(T h) const { return a * h + b; }
};
template <class T> struct then_linear {
  DUALCAST_HD linear<T> operator()(linear<T> e, linear<T> l) const {
    return {l.a * e.a, l.a * e.b + l.b};
  }
};

// A scan's pieces run as row operations (parallel_for_rows: one thread per piece on the CPU, a
// warp per piece on CUDA, whose 32 lanes then read 32 neighbouring elements at a time) where the
// axis is the innermost one; elsewhere one thread per piece (neighbouring threads take
// neighbouring rows, already side by side in memory) with this single lane.
struct one_lane {
  DUALCAST_HD static constexpr int lane() { return 0; }
  DUALCAST_HD static constexpr int count() { return 1; }
  template <class T, class Op> DUALCAST_HD T scan(T x, Op const &) const { return x; }
  template <class T> DUALCAST_HD T broadcast(T x, int) const { return x; }
  DUALCAST_HD static constexpr void sync() {}
};
// On the CPU a thread walks several pieces at once (a pass's group(k0, count) with its
// group_size, below): step i of each in turn, so that their independent dependency chains -- an
// add's, a compare's or a multiply's latency per element, one piece alone -- overlap in the core.
// Each piece does exactly what it does alone: the same bits. 8 walks suit a step of one add or
// multiply; a step with compares or several loads runs out of registers beyond 4 (cumsum,
// cumprod, cummin on 10^7 floats, 2 threads: forward 8.7 / 8.9 / 11.0 ms one piece at a time,
// 4.0 / 3.6 / 7.7 with 8 walks, 3.9 / 5.1 / 6.3 with 4; backward 11.8 / 21.7 / 22.2, 8.6 / 13.0 /
// 16.7, 7.9 / 10.7 / 14.7).
inline constexpr int lockstep_wide = 8, lockstep_narrow = 4;
// Steps of one element between neighbouring walks over contiguous pieces (lockstep, below).
inline constexpr index_t lockstep_skew = 16;

// f(std::integral_constant<int, g>{}) for g = 0 .. G - 1, unrolled: a grouped pass indexes its
// per-piece arrays by constants only, so the compiler keeps them in registers.
template <int G, class F> inline void each_of(F &&f) {
  [&]<int... g>(std::integer_sequence<int, g...>) { (f(std::integral_constant<int, g>{}), ...); }
  (std::make_integer_sequence<int, G>{});
}
// step(g, i) for the walks g < count (<= G) and their steps i in [first, steps[g]), each walk's in
// order of i: all walks interleaved while each has steps left, then each walk's remaining ones.
// With skew > 0 walk g runs (G - 1 - g) * skew steps ahead alone first, so that walks over pieces
// a multiple of 4 KiB apart do not touch addresses with the same low 12 bits at once (which the
// core takes for a store-to-load dependency: "4K aliasing").
template <int G, class Step>
inline void lockstep(index_t first, index_t const (&steps)[G], index_t count, index_t skew,
                     Step &&step) {
  index_t at[G]; // the next step of each walk
  each_of<G>([&](auto g) {
    index_t const ahead = first + (G - 1 - g) * skew;
    at[g] = g < count ? (ahead < steps[g] ? ahead : steps[g]) : 0;
    if (g < count)
      for (index_t i = first; i < at[g]; ++i)
        step(g, i);
  });
  if (count == G) {
    index_t m = steps[0] - at[0];
    each_of<G>([&](auto g) { m = steps[g] - at[g] < m ? steps[g] - at[g] : m; });
    for (index_t t = 0; t < m; ++t)
      each_of<G>([&](auto g) { step(g, at[g] + t); });
    each_of<G>([&](auto g) { at[g] += m > 0 ? m : 0; });
  }
  each_of<G>([&](auto g) {
    if (g < count)
      for (index_t i = at[g]; i < steps[g]; ++i)
        step(g, i);
  });
}

// Pieces side by side in memory -- element j of piece g right after element j of piece g - 1:
// neighbouring rows of a scan along an outer axis, each one piece, spanning the same elements
// j0 .. j1 - 1 -- walk in the lanes of vectors, W pieces per vector, step i of them one vector
// load or store per array (the passes' columns_group). columns_vectors vectors walk at once where
// that many vectors' worth of pieces are side by side: each step then reads whole cache lines of
// a page (one vector per step of a walk through a (1000, 8192) float array touched a new page
// every time: cumsum along axis 0 forward / backward 9.4 / 10.3 ms with 1 vector, 3.0 / 3.3 with
// 8; 15.6 / 25.7 in scalar lockstep). Their steps are a row apart (rows.inner elements), so the
// walks prefetch columns_ahead steps ahead.
inline constexpr int columns_vectors = 8;
inline constexpr index_t columns_ahead = 8;
inline bool pieces_side_by_side(scan_piece const *p, index_t count) {
  for (index_t g = 1; g < count; ++g)
    if (p[g].base != p[0].base + g || p[g].j0 != p[0].j0 || p[g].j1 != p[0].j1)
      return false;
  return true;
}
// A CPU pass's group p[0 .. count) of up to columns_vectors * W pieces: all of them side by side
// -> wide(); else per W pieces: side by side -> one(q), otherwise rest(q, end) for pieces
// [q, end).
template <int W, class Wide, class One, class Rest>
inline void by_columns(scan_piece const *p, index_t count, Wide &&wide, One &&one, Rest &&rest) {
  if (count == columns_vectors * W && pieces_side_by_side(p, count))
    return wide();
  for (index_t q = 0; q < count; q += W) {
    index_t const end = q + W < count ? q + W : count;
    if (end - q == W && pieces_side_by_side(p + q, W))
      one(q);
    else
      rest(q, end);
  }
}

// group(k0, count) of a CPU pass over whole pieces that has columns_group<W, NV>(k0, p) (NV * W
// pieces side by side in vector lanes) and lockstep_group(k0, count) (up to G pieces in
// lockstep): GS pieces per call, in vector lanes where they are side by side (W lanes per
// vector; GS == G: lockstep only).
template <int GS, int W, int G, class Pass>
inline void columns_or_lockstep(Pass const &pass, scan_rows const &rows, index_t blocks, index_t k0,
                                index_t count) {
  if constexpr (GS != G) {
    scan_piece p[GS];
    for (index_t g = 0; g < count; ++g)
      p[g] = piece_of(rows, rows.n, blocks, k0 + g);
    return by_columns<W>(
        p, count, [&] { pass.template columns_group<W, columns_vectors>(k0, p); },
        [&](index_t q) { pass.template columns_group<W, 1>(k0 + q, p + q); },
        [&](index_t q, index_t end) {
          for (index_t r = q; r < end; r += G)
            pass.lockstep_group(k0 + r, end - r < G ? end - r : G);
        });
  } else {
    for (index_t q = 0; q < count; q += G)
      pass.lockstep_group(k0 + q, count - q < G ? count - q : G);
  }
}

// The skew for walks along rows of these shapes: contiguous pieces only (lockstep, above).
inline index_t lockstep_skew_of(scan_rows const &rows) {
  return rows.inner == 1 ? lockstep_skew : 0;
}
// Walk g of the group of `count` pieces from k0: piece k0 + g, or past the count piece k0 again
// (set up, never walked: its results unused).
inline index_t group_piece(index_t k0, index_t g, index_t count) {
  return k0 + (g < count ? g : 0);
}

// Runs f(k, lanes) for the pieces k < n: as row operations when `rows_op`, else one thread each;
// on the CPU, a pass that has group(k0, count) runs group_size pieces per call, or
// contiguous_group_size where it has one and the pieces are contiguous (`rows_op`: the axis is
// the innermost; group_size then serves pieces side by side, which only other axes have).
template <class F> struct with_one_lane {
  F f;
  DUALCAST_HD void operator()(index_t k) const { f(k, one_lane{}); }
};
template <class F> struct piece_groups {
  F f;
  index_t n, size;
  void operator()(index_t q) const {
    index_t const k0 = q * size;
    f.group(k0, n - k0 < size ? n - k0 : size);
  }
};
template <class Ex, class F>
void for_each_piece(Ex const &ex, bool rows_op, index_t n, index_t cost, F const &f) {
  if constexpr (std::is_same_v<Ex, cpu> && requires { f.group(index_t(0), index_t(0)); }) {
    index_t size = F::group_size;
    if constexpr (requires { F::contiguous_group_size; })
      if (rows_op)
        size = F::contiguous_group_size;
    parallel_for(ex, (n + size - 1) / size, cost * size, piece_groups<F>{f, n, size});
  } else if (rows_op) {
    parallel_for_rows(ex, n, cost, f);
  } else {
    parallel_for(ex, n, cost, with_one_lane<F>{f});
  }
}

// Elements j0 .. j1 - 1 of a sequence combined in order, lanes.count() at a time: running value
// acc (undefined while !has: then an element starts it), load(j) element j; calls
// visit(j, before, after) with the running value before element j (acc itself while !has) and
// after it. Returns the running value after j1 - 1. With one lane: acc = has ? op(acc, x_j) : x_j
// element by element, the sequential loop; with a warp: each group of 32 is scanned over the
// lanes and then combined with acc (another association, the same value up to rounding).
template <bool Before, class Lanes, class T, class Op, class Load, class Visit>
DUALCAST_HD T lane_scan(Lanes const &lanes, index_t j0, index_t j1, bool has, T acc, Op const &op,
                        Load const &load, Visit const &visit) {
  constexpr int L = Lanes::count();
  int const l = lanes.lane();
  for (index_t c = j0; c < j1; c += L) {
    index_t const j = c + l;
    bool const in = j < j1;
    T v = load(in ? j : c); // (a lane past the end computes on a copy; its results are unused)
    v = lanes.scan(v, op);
    T const after = has ? op(acc, v) : v;
    T before = acc;
    if constexpr (Before && L > 1) {
      T const earlier = lanes.broadcast(v, l > 0 ? l - 1 : 0);
      if (l > 0)
        before = has ? op(acc, earlier) : earlier;
    }
    if (in)
      visit(j, before, after);
    if constexpr (L > 1)
      acc = lanes.broadcast(after, int(j1 - c < L ? j1 - c : L) - 1);
    else
      acc = after;
    has = true;
  }
  return acc;
}

} // namespace dualcast::detail
