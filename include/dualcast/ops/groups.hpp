// dualcast/ops/groups.hpp: how the reductions and scans of ops/prod.hpp, ops/reduce_op.hpp,
// ops/scan.hpp and ops/linear_recurrence.hpp see an array: a reduction over axes as groups of
// contiguous elements (split into blocks of a fixed length, so that one long group still runs in
// parallel and results do not depend on the number of threads), a scan along one axis as rows of
// a contiguous array with a stride (long rows split into pieces). Also the zero rule of the
// adjoints (ybar * partial is 0 where ybar is 0, whatever the partial). How their passes run
// over lanes: ops/lane_scan.hpp.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>

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

// The shape s without dimension `axis`.
inline shape drop_axis(shape const &s, int axis) {
  shape r;
  for (int i = 0; i < s.rank; ++i)
    if (i != axis)
      r.ext[r.rank++] = s.ext[i];
  return r;
}

} // namespace dualcast::detail
