// dualcast/ops/lane_scan.hpp: how the passes of the parallel primitives (ops/prod.hpp,
// ops/reduce_op.hpp, ops/scan.hpp, ops/linear_recurrence.hpp) walk a block or a piece: as row
// operations over lanes -- one lane on the CPU (the sequential loop), a CUDA warp's 32 lanes on
// the GPU, which then read 32 neighbouring elements at a time and scan them over the lanes in
// order (one thread per block of 4096 read 40-65 GB/s on an H200). lane_scan is that walk; the
// affine maps are what the recurrences compose over the lanes.
#pragma once

#include <dualcast/detail/device_dispatch.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/shape.hpp>

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
// Runs f(k, lanes) for the pieces k < n: as row operations when `rows_op`, else one thread each.
template <class F> struct with_one_lane {
  F f;
  DUALCAST_HD void operator()(index_t k) const { f(k, one_lane{}); }
};
template <class Ex, class F>
void for_each_piece(Ex const &ex, bool rows_op, index_t n, index_t cost, F const &f) {
  if (rows_op)
    parallel_for_rows(ex, n, cost, f);
  else
    parallel_for(ex, n, cost, with_one_lane<F>{f});
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
