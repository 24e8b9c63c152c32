// dualcast/ops/groups.hpp: how the reductions and scans of ops/prod.hpp, ops/reduce_op.hpp,
// ops/scan.hpp and ops/linear_recurrence.hpp see an array: a reduction over axes as groups of
// contiguous elements (split into blocks of a fixed length, so that one long group still runs in
// parallel and results do not depend on the number of threads), a scan along one axis as rows of
// a contiguous array with a stride. Also the zero rule of the adjoints (ybar * partial is 0 where
// ybar is 0, whatever the partial).
#pragma once

#include <dualcast/detail/device_dispatch.hpp>
#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/errors.hpp>
#include <dualcast/shape.hpp>

#include <string>
#include <vector>

namespace dualcast::detail {

// Elements per block of a blocked reduction: a fixed number (not one per thread), so that the
// order of the operations, and every result bit, is the same at any number of threads.
inline constexpr index_t reduce_block = 4096;

// A reduction of shape `in` over the masked axes: n_out groups of n_red elements, contiguous
// once the input is permuted by `perm` (kept axes first, reduced ones last), each split into
// `blocks` blocks of reduce_block elements (the last one shorter).
struct reduce_groups {
  std::vector<int> perm, inv;
  shape kd;  // the result with the reduced axes kept as 1
  shape out; // the result's shape (kd when keepdims)
  shape ps;  // the input's shape permuted by perm
  index_t n_out = 0, n_red = 1, blocks = 0;
};

inline reduce_groups make_reduce_groups(char const *op, shape const &in,
                                        std::vector<int> const &axes, bool keepdims) {
  reduce_groups r;
  auto mask = axis_mask(op, axes, in.rank);
  r.perm = kept_then_reduced(mask);
  r.inv = inverse_perm(r.perm);
  r.kd = reduced_shape(in, mask, true);
  r.out = keepdims ? r.kd : reduced_shape(in, mask, false);
  r.ps = permuted_shape(in, r.perm);
  r.n_out = r.kd.size();
  for (int i = 0; i < in.rank; ++i)
    if (mask[std::size_t(i)])
      r.n_red *= in.ext[i];
  r.blocks = (r.n_red + reduce_block - 1) / reduce_block;
  return r;
}

// The rows of a scan along one axis of a contiguous array of shape (outer, n, inner): row r
// (r < outer * inner) holds the elements base(r) + j * inner, j < n. Row r's position in the
// array without the scanned axis is r itself.
struct scan_rows {
  index_t outer = 1, n = 0, inner = 1;
  DUALCAST_HD index_t count() const { return outer * inner; }
  DUALCAST_HD index_t base(index_t r) const { return (r / inner) * n * inner + r % inner; }
};

inline scan_rows make_scan_rows(shape const &s, int axis) {
  scan_rows r;
  for (int i = 0; i < s.rank; ++i) {
    if (i < axis)
      r.outer *= s.ext[i];
    else if (i > axis)
      r.inner *= s.ext[i];
  }
  r.n = s.ext[axis];
  return r;
}

// The blocks of a scan: each row split into `blocks` pieces of scan_block elements along the
// axis (the last one shorter). Only few long rows are split (a decision on the shape alone, so
// the result is the same at any number of threads); otherwise blocks == 1: one row, one piece.
inline constexpr index_t scan_block = 4096;
inline index_t scan_blocks(scan_rows const &rows, index_t n) {
  return rows.count() >= 16 || n <= 2 * scan_block ? 1 : (n + scan_block - 1) / scan_block;
}
struct scan_piece {
  index_t r, b, base, j0, j1; // row, block, the row's first element, elements [j0, j1)
};
DUALCAST_HD inline scan_piece piece_of(scan_rows const &rows, index_t n, index_t blocks,
                                       index_t k) {
  index_t const r = k / blocks, b = k % blocks;
  index_t const j0 = blocks == 1 ? 0 : b * scan_block;
  index_t const j1 = blocks == 1 || n - j0 < scan_block ? n : j0 + scan_block;
  return {r, b, rows.base(r), j0, j1};
}

// ybar * partial, 0 where ybar is 0 (an infinite or NaN partial does not reach gradients that
// do not depend on it, as in the tape's fused nodes).
template <class T> DUALCAST_HD T times_cotangent(T ybar, T partial) {
  return ybar == T(0) ? T(0) : ybar * partial;
}

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

// The shape s without dimension `axis`.
inline shape drop_axis(shape const &s, int axis) {
  shape r;
  for (int i = 0; i < s.rank; ++i)
    if (i != axis)
      r.ext[r.rank++] = s.ext[i];
  return r;
}

} // namespace dualcast::detail
