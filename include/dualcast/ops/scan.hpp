// dualcast/ops/scan.hpp: scans along one axis, inclusive and exclusive, on tape variables and on
// tensors: cumulative sums, products, maxima and minima, and a scan with an associative operator
// of your own.
//
//   dualcast::cumsum(x, 1);                       // y_i = x_0 + ... + x_i along axis 1
//   dualcast::cumprod(x, -1, true);               // exclusive: y_i = x_0 * ... * x_(i-1), y_0 = 1
//   dualcast::cummax(x, 0);  dualcast::cummin(x, 0);
//   dualcast::scan(x, [](auto a, auto b) { return a * b + a + b; }, 0.0, -1);
//
// Inclusive: y_i = x_0 op ... op x_i. Exclusive: y_0 = the neutral element (0, 1, -inf, +inf, or
// the one given), y_i = x_0 op ... op x_(i-1). Elements combine in order along the axis (a user
// operator need not be commutative; it must be associative and generic: the adjoint calls it on
// dual numbers, dualcast::dual<T, 2>, so write it with dualcast's math functions; it is scalar).
//
// Adjoints (Futhark's rule for any operator): the backward linear recurrence
//   s_(n-1) = ybar_(n-1),  s_i = ybar_i + J_(i+1) s_(i+1),  J_i = d(y_(i-1) op x_i) / d y_(i-1),
// then xbar_i = s_i * d(y_(i-1) op x_i) / d x_i (xbar_0 = s_0), i.e. one reverse scan of affine
// maps, evaluated in one backward pass per row; the two partials at each element come from one
// evaluation of op on dual numbers (fixed formulas for the built-in operators). So:
//   cumsum   xbar = the reverse cumulative sum of ybar;
//   cumprod  J_i = x_i, d/dx_i = y_(i-1): no division, exact with any zeros;
//   cummax / cummin  y_i takes x_i only where x_i is strictly larger (smaller) than y_(i-1), so
//            the gradient of y_i goes to the FIRST element reaching the running extremum (ties:
//            the lowest index, as dualcast::max); NaN propagates (a NaN element wins, and stays).
// A term ybar * partial is 0 where ybar is 0, whatever the partial.
// On a tape over duals (host only, docs/higher-order.md): cumsum runs on the value and on each
// partial apart (linear); cummax / cummin select elements, partials and all (below); cumprod and
// scan refuse dual elements at compile time.
//
// Work: linear. Rows (all positions of the other axes) run in parallel, each sequentially: forward
// one op per element, backward one (dual) op per element. Fewer than 16 rows longer than 8192
// elements are split into pieces of 4096 along the axis that run in parallel too (a scan of a
// 1-D array uses every thread): forward reduces each piece, combines the pieces' carries in order
// per row and rescans each piece from its carry (two ops per element); backward writes each
// piece's part of the recurrence as an affine map s -> A s + B of the carry entering it, combines
// those from the right per row and reruns each piece from its carry (two dual ops per element).
// The split depends on the shape only, so results are the same bits at any number of threads
// (split rows round differently from unsplit ones). On the CPU a thread walks 4 or 8 pieces (or
// rows) in lockstep, each exactly as alone (lane_scan.hpp): 10^7 floats, 2 threads, forward +
// backward of cumsum 20.1-20.8 -> 11.7-12.3 ms, cumprod 29.4-29.7 -> 14.1-15.4, cummin
// 32.2-32.6 -> 20.9-21.9 (two runs each). The backward passes of the built-in operators walk 16
// (cumsum) or 8 contiguous pieces in the lanes of one vector instead (vector_walks.hpp; the
// same bits): backward alone 5.5 -> 3.6, 8.9 -> 7.1, 13.7 -> 9.3 ms. Along any axis but the
// last, neighbouring rows lie side by side in memory and walk in the lanes of vectors, 8 vectors'
// worth per step (lane_scan.hpp: by_columns; the same bits): (1000, 8192) along axis 0, forward /
// backward of cumsum 12-16 / 22-26 -> 3.0-3.5 / 3.3-3.9 ms, cumprod 16-17 / 46-49 -> 3.0-3.5 /
// 6.3-9.1, cummin 20-22 / 44-46 -> 2.9-3.5 / 6.4-8.6.
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/ops/lane_scan.hpp>
#include <dualcast/ops/vector_walks.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast {

namespace detail {

// The operators of a scan: the value op(y_prev, x), and the partials of op(y_prev, x) with
// respect to y_prev and x. uses_values: whether the partials depend on the values (cumsum's do
// not: its backward reads no saved tensor, and runs as plain reverse running sums).
// lanes_partials: the partials on vectors of walks (vector_walks.hpp), lane for lane the same
// numbers; the built-in operators have it, and their backward passes walk pieces in lanes.
template <class T> struct scan_plus {
  static constexpr bool uses_values = false;
  static constexpr bool walks_in_lanes = true, dprev_reads_prev = false;
  static constexpr int forward_walks = lockstep_wide; // pieces a CPU thread scans at once
  DUALCAST_HD T operator()(T a, T b) const { return a + b; }
  template <class V> static V lanes_op(V a, V b) { return a + b; }
  DUALCAST_HD void partials(T, T, T &dprev, T &dx) const { dprev = dx = T(1); }
};
template <class Op> struct is_scan_plus : std::false_type {};
template <class T> struct is_scan_plus<scan_plus<T>> : std::true_type {};

template <class T> struct scan_times {
  static constexpr bool uses_values = true;
  static constexpr int forward_walks = lockstep_wide;
  DUALCAST_HD T operator()(T a, T b) const { return a * b; }
  template <class V> static V lanes_op(V a, V b) { return a * b; }
  DUALCAST_HD void partials(T prev, T x, T &dprev, T &dx) const { dprev = x, dx = prev; }
  static constexpr bool walks_in_lanes = true, dprev_reads_prev = false;
  template <class V> static void lanes_partials(V prev, V x, V &dprev, V &dx) {
    dprev = x, dx = prev;
  }
};
template <class T, bool Max> struct scan_extremum {
  static constexpr bool uses_values = true;
  static constexpr int forward_walks = lockstep_narrow;
  // Whether op(prev, x) is x: x strictly beyond prev, or x NaN where prev is not.
  DUALCAST_HD static bool takes(T prev, T x) {
    return (Max ? x > prev : x < prev) || (x != x && prev == prev);
  }
  DUALCAST_HD T operator()(T a, T b) const { return takes(a, b) ? b : a; }
  DUALCAST_HD void partials(T prev, T x, T &dprev, T &dx) const {
    bool const t = takes(prev, x);
    dprev = t ? T(0) : T(1);
    dx = t ? T(1) : T(0);
  }
  static constexpr bool walks_in_lanes = true, dprev_reads_prev = true;
  template <class V> static auto lanes_takes(V prev, V x) {
    auto const beyond = Max ? x > prev : x < prev;
    return beyond | ((x != x) & (prev == prev));
  }
  template <class V> static V lanes_op(V a, V b) { return lanes_takes(a, b) ? b : a; }
  template <class V> static void lanes_partials(V prev, V x, V &dprev, V &dx) {
    auto const t = lanes_takes(prev, x);
    dprev = t ? V{} : V{} + T(1);
    dx = t ? V{} + T(1) : V{};
  }
};
// A user operator: the partials by one evaluation on dual numbers with two partials.
template <class T, class Op> struct scan_user {
  static constexpr bool uses_values = true;
  static constexpr bool walks_in_lanes = false; // (op may branch: one piece per scalar walk)
  static constexpr int forward_walks = lockstep_narrow;
  Op op;
  DUALCAST_HD T operator()(T a, T b) const { return T(op(a, b)); }
  DUALCAST_HD void partials(T prev, T x, T &dprev, T &dx) const {
    using D = dual<T, 2>;
    D const r = op(D::variable(prev, 0), D::variable(x, 1));
    dprev = r.d[0];
    dx = r.d[1];
  }
};

// The CPU's forward passes take this many pieces per call: columns_vectors vectors' worth when
// the operator runs on vectors (for pieces side by side, lane_scan.hpp), else Op::forward_walks
// (lockstep, lane_scan.hpp).
template <class T, class Op> constexpr int forward_group_size() {
#if DUALCAST_HAS_SIMD
  if constexpr (Op::walks_in_lanes && (native_width<T> >= Op::forward_walks))
    return columns_vectors * native_width<T>;
#endif
  return Op::forward_walks;
}

// Each pass is a row operation over lanes (lane_scan.hpp): one lane walks its piece
// element by element (the CPU, and CUDA where the axis is not the innermost), a warp walks it 32
// neighbouring elements at a time. One CUDA thread per piece of 4096 read 40 GB/s on an H200.

// Forward, pass 1 (blocks > 1 only): part[k] = x_j0 op ... op x_(j1-1) over piece k.
template <class T, class Op> struct scan_piece_reduce {
  T const *x;
  T *part;
  scan_rows rows;
  index_t blocks;
  Op op;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(rows, rows.n, blocks, k);
    T const *xr = x + p.base;
    index_t const s = rows.inner;
    T const total = lane_scan<false>(
        lanes, p.j0, p.j1, false, T(0), op, [&](index_t j) { return xr[j * s]; },
        [](index_t, T, T) {});
    if (lanes.lane() == 0)
      part[k] = total;
  }
  // The CPU's pieces k0 .. k0 + count - 1 at once (lane_scan.hpp, lockstep): the loop above each.
  static constexpr int group_size = Op::forward_walks;
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    constexpr int G = group_size;
    index_t const skew = lockstep_skew_of(rows);
    index_t const s = rows.inner;
    T const *xr[G];
    index_t steps[G];
    T acc[G];
    each_of<G>([&](auto g) {
      scan_piece const p = piece_of(rows, rows.n, blocks, group_piece(k0, g, count));
      xr[g] = x + p.base + p.j0 * s;
      steps[g] = p.j1 - p.j0; // >= 1: pieces only split rows longer than 2 blocks
      acc[g] = xr[g][0];
    });
    lockstep<G>(1, steps, count, skew,
                [&](auto g, index_t i) { acc[g] = op(acc[g], xr[g][i * s]); });
    each_of<G>([&](auto g) {
      if (g < count)
        part[k0 + g] = acc[g];
    });
  }
};
// Forward, pass 2 (blocks > 1 only), row r: part[k] becomes the carry into piece k, the
// reduction of the pieces before it (undefined for the first).
template <class T, class Op> struct scan_piece_carries {
  T *part;
  index_t blocks;
  Op op;
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    T *p = part + r * blocks;
    lane_scan<true>(
        lanes, 0, blocks, false, T(0), op, [&](index_t b) { return p[b]; },
        [&](index_t b, T before, T) {
          if (b > 0)
            p[b] = before;
        });
  }
};
// Forward, pass 3: piece k scanned from its carry. Exclusive: y_j = x_0 op ... op x_(j-1).
template <class T, class Op> struct scan_piece_forward {
  T const *x, *carry;
  T *y;
  scan_rows rows;
  index_t blocks;
  bool exclusive;
  T neutral;
  Op op;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(rows, rows.n, blocks, k);
    index_t const s = rows.inner;
    T const *xr = x + p.base;
    T *yr = y + p.base;
    bool const has = p.b > 0;
    auto load = [&](index_t j) { return xr[j * s]; };
    if (exclusive)
      lane_scan<true>(lanes, p.j0, p.j1, has, has ? carry[k] : neutral, op, load,
                      [&](index_t j, T before, T) { yr[j * s] = before; });
    else
      lane_scan<false>(lanes, p.j0, p.j1, has, has ? carry[k] : neutral, op, load,
                       [&](index_t j, T, T after) { yr[j * s] = after; });
  }
  // The CPU's pieces k0 .. k0 + count - 1: side by side in memory (neighbouring rows of a scan
  // along an outer axis) in the lanes of vectors (below), else Op::forward_walks at a time in
  // lockstep (lane_scan.hpp); each as the loop above, its first element (which starts the running
  // value where no carry enters) peeled.
  static constexpr int group_size = forward_group_size<T, Op>();
  static constexpr int contiguous_group_size = Op::forward_walks;
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    columns_or_lockstep<group_size, simd_lanes<T>, Op::forward_walks>(*this, rows, blocks, k0,
                                                                      count);
  }
  DUALCAST_FLATTEN void lockstep_group(index_t k0, index_t count) const {
    constexpr int G = Op::forward_walks;
    index_t const skew = lockstep_skew_of(rows);
    index_t const s = rows.inner;
    T const *xr[G];
    T *yr[G];
    index_t steps[G];
    T acc[G];
    each_of<G>([&](auto g) {
      index_t const k = group_piece(k0, g, count);
      scan_piece const p = piece_of(rows, rows.n, blocks, k);
      xr[g] = x + p.base + p.j0 * s;
      yr[g] = y + p.base + p.j0 * s;
      steps[g] = p.j1 - p.j0; // >= 1: rows are not empty here
      bool const has = p.b > 0;
      T const before = has ? carry[k] : neutral, after = has ? op(before, xr[g][0]) : xr[g][0];
      if (g < count)
        yr[g][0] = exclusive ? before : after;
      acc[g] = after;
    });
    if (exclusive)
      lockstep<G>(1, steps, count, skew, [&](auto g, index_t i) {
        yr[g][i * s] = acc[g];
        acc[g] = op(acc[g], xr[g][i * s]);
      });
    else
      lockstep<G>(1, steps, count, skew, [&](auto g, index_t i) {
        acc[g] = op(acc[g], xr[g][i * s]);
        yr[g][i * s] = acc[g];
      });
  }
#if DUALCAST_HAS_SIMD
  // NV * W pieces side by side (pieces_side_by_side), piece v * W + g in lane g of vector v:
  // step i reads NV vectors of x and writes NV of y.
  template <int W, int NV> void columns_group(index_t k0, scan_piece const *p) const {
    using V = walk_vector<T, W>;
    index_t const s = rows.inner, steps = p[0].j1 - p[0].j0; // >= 1: rows are not empty here
    T const *xr = x + p[0].base + p[0].j0 * s;
    T *yr = y + p[0].base + p[0].j0 * s;
    bool const has = p[0].b > 0;
    V acc[NV];
    for (int v = 0; v < NV; ++v) {
      V before = V{} + neutral;
      if (has)
        for (int g = 0; g < W; ++g)
          before[g] = carry[k0 + v * W + g];
      acc[v] = load_walk<W>(xr + v * W);
      if (has)
        acc[v] = Op::lanes_op(before, acc[v]);
      store_walk(yr + v * W, exclusive ? before : acc[v]);
    }
    for (index_t i = 1; i < steps; ++i) {
      T const *xi = xr + i * s,
              *ahead = xr + (i + columns_ahead < steps ? i + columns_ahead : i) * s;
      T *yi = yr + i * s;
      for (int v = 0; v < NV * W; v += 64 / int(sizeof(T)))
        __builtin_prefetch(ahead + v);
      for (int v = 0; v < NV; ++v) {
        V const xv = load_walk<W>(xi + v * W);
        if (exclusive) {
          store_walk(yi + v * W, acc[v]);
          acc[v] = Op::lanes_op(acc[v], xv);
        } else {
          acc[v] = Op::lanes_op(acc[v], xv);
          store_walk(yi + v * W, acc[v]);
        }
      }
    }
  }
#endif
};

// The adjoint: the backward linear recurrence s_j = zbar_j + J_(j+1) s_(j+1) from each row's
// end, xbar_j = s_j * d(z_(j-1) op x_j) / d x_j. An exclusive scan is the inclusive one of
// x_0 .. x_(n-2) shifted by one place (z_j = y_(j+1)): x_(n-1) gets 0. Pieces split the m = n - 1
// (exclusive) or n (inclusive) elements z_j of a row.
template <class T, class Op> struct scan_adjoint_args {
  T const *x, *y, *gy;
  scan_rows rows;
  index_t m, blocks;
  bool exclusive;
  Op op;
  DUALCAST_HD index_t at(scan_piece const &p, index_t j) const { return p.base + j * rows.inner; }
  // The partials of z_j = z_(j-1) op x_j (j >= 1).
  DUALCAST_HD void partials(scan_piece const &p, index_t j, T &dprev, T &dx) const {
    dprev = dx = T(1);
    if constexpr (Op::uses_values)
      op.partials(y[at(p, j - 1 + (exclusive ? 1 : 0))], x[at(p, j)], dprev, dx);
  }
  DUALCAST_HD T zbar(scan_piece const &p, index_t j) const {
    return gy[at(p, j + (exclusive ? 1 : 0))];
  }
};

// The CPU's backward passes take this many pieces per call: W = walks_in_vector (16 floats for
// cumsum, which reads and writes an array per walk, 8 for the others, which read two more) when
// the operator's partials run on vectors (then W contiguous pieces of one length walk in the
// lanes of one vector, vector_walks.hpp), else 4 (lockstep, lane_scan.hpp).
template <class T, class Op> constexpr int backward_group_size() {
#if DUALCAST_HAS_SIMD
  constexpr int W = Op::uses_values ? walks_in_vector<T, 4> : walks_in_vector<T, 2>;
  if constexpr (Op::walks_in_lanes && W > lockstep_narrow)
    return W;
#endif
  return lockstep_narrow;
}
// Whether W walks of steps[0 .. W) steps walk in the lanes of a vector: contiguous pieces of one
// length, at least a vector's worth ...
template <int W, class T, class Op>
bool walk_in_lanes(scan_adjoint_args<T, Op> const &a, index_t const *steps) {
  if (a.rows.inner != 1 || steps[0] < W)
    return false;
  for (int g = 1; g < W; ++g)
    if (steps[g] != steps[0])
      return false;
  return true;
}
// ... that lie one after another along one row, scan_block elements apart.
template <int W> bool pieces_in_step(scan_piece const *p) {
  for (int g = 1; g < W; ++g)
    if (p[g].base + p[g].j1 != p[0].base + p[0].j1 + g * scan_block)
      return false;
  return true;
}

// On a warp the backward recurrence runs as a scan of affine maps of the carry (lane_scan.hpp):
// element j's c -> J_j (zbar_j + c), composed in walking order (from the right). One lane keeps
// the sequential loops below, bit for bit as before.
// Element j's map (j >= 1; the identity for j == 0, which has no J).
template <class T, class Op>
DUALCAST_HD affine<T> element_map(scan_adjoint_args<T, Op> const &a, scan_piece const &p,
                                  index_t j) {
  if (j == 0)
    return {T(1), T(0)};
  T dprev, dx;
  a.partials(p, j, dprev, dx);
  return {dprev, times_cotangent(a.zbar(p, j), dprev)};
}

// Backward, pass 1 (blocks > 1 only): piece k as an affine map of the carry c entering it from
// the right: the carry leaving it to the left is A c + B (A = the product of its J_j).
template <class T, class Op> struct scan_piece_summary {
  scan_adjoint_args<T, Op> a;
  T *A, *B;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(a.rows, a.m, a.blocks, k);
    T ca = T(1), cb = T(0);
    if constexpr (Lanes::count() > 1) { // walk i: element j = j1 - 1 - i
      affine<T> const f = lane_scan<false>(
          lanes, 0, p.j1 - p.j0, true, affine<T>{T(1), T(0)}, then_affine<T>{},
          [&](index_t i) { return element_map(a, p, p.j1 - 1 - i); },
          [](index_t, affine<T>, affine<T>) {});
      ca = f.a, cb = f.b;
    } else if constexpr (!Op::uses_values) { // +: every partial is 1, the summary a plain sum
      for (index_t j = p.j1 - 1; j >= p.j0 && j >= 1; --j)
        cb = a.zbar(p, j) + cb;
    } else {
      for (index_t j = p.j1 - 1; j >= p.j0 && j >= 1; --j) {
        T dprev, dx;
        a.partials(p, j, dprev, dx);
        cb = times_cotangent(a.zbar(p, j) + cb, dprev);
        ca = ca * dprev;
      }
    }
    if (lanes.lane() == 0)
      A[k] = ca, B[k] = cb;
  }
  // The CPU's one-lane loop above, one element (j >= 1).
  void step(scan_piece const &p, index_t j, T &ca, T &cb) const {
    if constexpr (!Op::uses_values) {
      cb = a.zbar(p, j) + cb;
    } else {
      T dprev, dx;
      a.partials(p, j, dprev, dx);
      cb = times_cotangent(a.zbar(p, j) + cb, dprev);
      ca = ca * dprev;
    }
  }
  // The CPU's pieces k0 .. k0 + count - 1: in the lanes of a vector (below) or 4 at a time in
  // lockstep (lane_scan.hpp), each as the one-lane loop above; step i is element j1 - 1 - i.
  static constexpr int group_size = backward_group_size<T, Op>();
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    constexpr int G = group_size;
    scan_piece p[G];
    index_t steps[G];
    for (int g = 0; g < G; ++g) {
      p[g] = piece_of(a.rows, a.m, a.blocks, group_piece(k0, g, count));
      steps[g] = p[g].j1 - (p[g].j0 > 1 ? p[g].j0 : 1);
      steps[g] = steps[g] > 0 ? steps[g] : 0;
    }
#if DUALCAST_HAS_SIMD
    if constexpr (G != lockstep_narrow)
      if (count == G && walk_in_lanes<G>(a, steps) && pieces_in_step<G>(p))
        return lanes_group<G>(k0, p, steps[0]);
#endif
    for (index_t s = 0; s < count; s += lockstep_narrow)
      lockstep_group(k0 + s, count - s < lockstep_narrow ? count - s : lockstep_narrow, p + s,
                     steps + s);
  }
  void lockstep_group(index_t k0, index_t count, scan_piece const *p,
                      index_t const *steps_at) const {
    constexpr int G = lockstep_narrow;
    index_t steps[G];
    T ca[G], cb[G];
    each_of<G>([&](auto g) {
      steps[g] = g < count ? steps_at[g] : 0;
      ca[g] = T(1), cb[g] = T(0);
    });
    lockstep<G>(0, steps, count, lockstep_skew_of(a.rows),
                [&](auto g, index_t i) { step(p[g], p[g].j1 - 1 - i, ca[g], cb[g]); });
    each_of<G>([&](auto g) {
      if (g < count)
        A[k0 + g] = ca[g], B[k0 + g] = cb[g];
    });
  }
#if DUALCAST_HAS_SIMD
  // W contiguous pieces of `steps` steps each, piece g in lane g: W elements of every piece per
  // round, loaded and transposed (vector_walks.hpp); the last steps % W lane by lane.
  template <int W> void lanes_group(index_t k0, scan_piece const *p, index_t steps) const {
    using V = walk_vector<T, W>;
    index_t const ex = a.exclusive ? 1 : 0;
    // piece 0's last W elements; piece g's lie g * scan_block further (walk_in_lanes)
    index_t const last = p[0].base + p[0].j1 - W;
    T const *gz = a.gy + last + ex, *yp = nullptr, *xp = nullptr;
    if constexpr (Op::uses_values)
      yp = a.y + last - 1 + ex, xp = a.x + last;
    V ca = V{} + T(1), cb = V{};
    index_t const rounds = steps / W;
    for (index_t t = 0; t < rounds; ++t) {
      index_t const o = -t * W;
      V z[W], yv[W], xv[W];
      index_t const f = o - prefetch_ahead<T>;
      if (f >= W - steps) { // (prefetched while within the pieces)
        prefetch_walks<W>(gz + f, scan_block);
        if constexpr (Op::uses_values)
          prefetch_walks<W>(xp + f, scan_block);
        if constexpr (Op::uses_values && Op::dprev_reads_prev)
          prefetch_walks<W>(yp + f, scan_block);
      }
      load_transposed<W>(z, gz + o, scan_block);
      if constexpr (!Op::uses_values) {
        for (int e = W - 1; e >= 0; --e)
          cb = z[e] + cb;
      } else {
        load_transposed<W>(xv, xp + o, scan_block);
        if constexpr (Op::dprev_reads_prev)
          load_transposed<W>(yv, yp + o, scan_block);
        for (int e = W - 1; e >= 0; --e) {
          V dprev, dx; // (dx unused; y unread unless dprev needs it)
          Op::lanes_partials(Op::dprev_reads_prev ? yv[e] : xv[e], xv[e], dprev, dx);
          cb = times_cotangent_lanes(z[e] + cb, dprev);
          ca = ca * dprev;
        }
      }
    }
    for (int g = 0; g < W; ++g) {
      T cag = ca[g], cbg = cb[g];
      for (index_t i = rounds * W; i < steps; ++i)
        step(p[g], p[g].j1 - 1 - i, cag, cbg);
      A[k0 + g] = cag, B[k0 + g] = cbg;
    }
  }
#endif
};
// Backward, pass 2 (blocks > 1 only), row r: A[k] becomes the carry entering piece k.
template <class T> struct scan_piece_adjoint_carries {
  T *A;
  T const *B;
  index_t blocks;
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    if constexpr (Lanes::count() > 1) { // walk i: piece k = r * blocks + blocks - 1 - i
      index_t const last = r * blocks + blocks - 1;
      lane_scan<true>(
          lanes, 0, blocks, true, affine<T>{T(1), T(0)}, then_affine<T>{},
          [&](index_t i) {
            return affine<T>{A[last - i], B[last - i]};
          },
          [&](index_t i, affine<T> before, affine<T>) { A[last - i] = before(T(0)); });
    } else {
      T c = T(0);
      for (index_t b = blocks - 1; b >= 0; --b) {
        index_t const k = r * blocks + b;
        T const next = times_cotangent(c, A[k]) + B[k];
        A[k] = c;
        c = next;
      }
    }
  }
};
// Backward, pass 3: piece k from its carry (0 for the last piece).
template <class T, class Op> struct scan_piece_adjoint {
  scan_adjoint_args<T, Op> a;
  T const *carry;
  T *gx;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(a.rows, a.m, a.blocks, k);
    if (a.exclusive && p.b + 1 == a.blocks && lanes.lane() == 0)
      gx[a.at(p, a.rows.n - 1)] = T(0);
    T c = a.blocks > 1 ? carry[k] : T(0); // J_(j+1) s_(j+1)
    if constexpr (!Op::uses_values) {     // +: a reverse running sum (the guard below is for
      // partials that may be infinite; these are all 1, and its test sat in the serial chain)
      if constexpr (Lanes::count() > 1) {
        lane_scan<false>(
            lanes, 0, p.j1 - p.j0, true, c, plus_op<T>{},
            [&](index_t i) { return a.zbar(p, p.j1 - 1 - i); },
            [&](index_t i, T, T after) { gx[a.at(p, p.j1 - 1 - i)] = after; });
      } else {
        for (index_t j = p.j1 - 1; j >= p.j0; --j) {
          c = a.zbar(p, j) + c;
          gx[a.at(p, j)] = c;
        }
      }
    } else if constexpr (Lanes::count() > 1) {
      // (an else, not a return: nvcc reports the loop after a constexpr return unreachable)
      lane_scan<true>(
          lanes, 0, p.j1 - p.j0, true, affine<T>{T(1), T(0)}, then_affine<T>{},
          [&](index_t i) { return element_map(a, p, p.j1 - 1 - i); },
          [&](index_t i, affine<T> before, affine<T>) {
            index_t const j = p.j1 - 1 - i;
            T const sj = a.zbar(p, j) + before(c);
            T dprev = T(1), dx = T(1);
            if (j > 0)
              a.partials(p, j, dprev, dx);
            gx[a.at(p, j)] = j == 0 ? sj : times_cotangent(sj, dx);
          });
    } else {
      for (index_t j = p.j1 - 1; j >= p.j0; --j) {
        T const sj = a.zbar(p, j) + c;
        if (j == 0) {
          gx[a.at(p, 0)] = sj;
          break;
        }
        T dprev, dx;
        a.partials(p, j, dprev, dx);
        gx[a.at(p, j)] = times_cotangent(sj, dx);
        c = times_cotangent(sj, dprev);
      }
    }
  }
  // The CPU's one-lane loop above, one element (j >= 1 where the partials are used), and the
  // element 0 that ends a row's walk.
  void step(scan_piece const &p, index_t j, T &c) const {
    if constexpr (!Op::uses_values) {
      c = a.zbar(p, j) + c;
      gx[a.at(p, j)] = c;
    } else {
      T const sj = a.zbar(p, j) + c;
      T dprev, dx;
      a.partials(p, j, dprev, dx);
      gx[a.at(p, j)] = times_cotangent(sj, dx);
      c = times_cotangent(sj, dprev);
    }
  }
  void finish(scan_piece const &p, T c) const {
    if (Op::uses_values && p.j0 == 0 && p.j1 > 0)
      gx[a.at(p, 0)] = a.zbar(p, 0) + c;
  }
  // The CPU's pieces k0 .. k0 + count - 1, each as the one-lane loop above (step i is element
  // j1 - 1 - i, element 0, which has no partials, after them): pieces side by side in memory
  // (neighbouring rows of a scan along an outer axis) in the lanes of columns_vectors vectors or
  // of one, contiguous pieces of one length W per vector (transposed), the others 4 at a time in
  // lockstep (lane_scan.hpp).
  static constexpr int walk_lanes = backward_group_size<T, Op>();
  static constexpr int group_size =
      walk_lanes != lockstep_narrow ? columns_vectors * walk_lanes : walk_lanes;
  static constexpr int contiguous_group_size = walk_lanes;
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    constexpr int G = group_size;
    scan_piece p[G];
    index_t steps[G];
    T c[G];
    for (int g = 0; g < count; ++g) { // (the walks past the count are never read)
      index_t const k = k0 + g;
      p[g] = piece_of(a.rows, a.m, a.blocks, k);
      if (a.exclusive && p[g].b + 1 == a.blocks)
        gx[a.at(p[g], a.rows.n - 1)] = T(0);
      index_t const last = Op::uses_values && p[g].j0 == 0 ? 1 : p[g].j0; // partials from j = 1
      steps[g] = p[g].j1 > last ? p[g].j1 - last : 0;
      c[g] = a.blocks > 1 ? carry[k] : T(0);
    }
    constexpr index_t L = lockstep_narrow;
#if DUALCAST_HAS_SIMD
    if constexpr (G != walk_lanes) {
      constexpr int W = walk_lanes;
      return by_columns<W>(
          p, count, [&] { columns_group<W, columns_vectors>(p, steps[0], c); },
          [&](index_t q) { columns_group<W, 1>(p + q, steps[q], c + q); },
          [&](index_t q, index_t end) {
            if (end - q == W && walk_in_lanes<W>(a, steps + q) && pieces_in_step<W>(p + q))
              return lanes_group<W>(p + q, steps[q], c + q);
            for (index_t r = q; r < end; r += L)
              lockstep_group(end - r < L ? end - r : L, p + r, steps + r, c + r);
          });
    }
#endif
    for (index_t r = 0; r < count; r += L)
      lockstep_group(count - r < L ? count - r : L, p + r, steps + r, c + r);
  }
  void lockstep_group(index_t count, scan_piece const *p, index_t const *steps_at,
                      T const *c_at) const {
    constexpr int G = lockstep_narrow;
    index_t steps[G];
    T c[G];
    each_of<G>([&](auto g) {
      steps[g] = g < count ? steps_at[g] : 0;
      c[g] = g < count ? c_at[g] : T(0);
    });
    lockstep<G>(0, steps, count, lockstep_skew_of(a.rows),
                [&](auto g, index_t i) { step(p[g], p[g].j1 - 1 - i, c[g]); });
    each_of<G>([&](auto g) {
      if (g < count)
        finish(p[g], c[g]);
    });
  }
#if DUALCAST_HAS_SIMD
  // W contiguous pieces of `steps` steps each, piece g in lane g: W elements of every piece per
  // round, loaded and transposed (vector_walks.hpp), the adjoints transposed back and stored; the
  // last steps % W lane by lane.
  template <int W> void lanes_group(scan_piece const *p, index_t steps, T const *c0) const {
    using V = walk_vector<T, W>;
    index_t const ex = a.exclusive ? 1 : 0;
    // piece 0's last W elements; piece g's lie g * scan_block further (walk_in_lanes)
    index_t const last = p[0].base + p[0].j1 - W;
    T const *gz = a.gy + last + ex, *yp = nullptr, *xp = nullptr;
    T *gp = gx + last;
    if constexpr (Op::uses_values)
      yp = a.y + last - 1 + ex, xp = a.x + last;
    V c;
    for (int g = 0; g < W; ++g)
      c[g] = c0[g];
    index_t const rounds = steps / W;
    for (index_t t = 0; t < rounds; ++t) {
      index_t const o = -t * W;
      V z[W], yv[W], xv[W], out[W];
      index_t const f = o - prefetch_ahead<T>;
      if (f >= W - steps) { // (prefetched while within the pieces)
        prefetch_walks<W>(gz + f, scan_block);
        if constexpr (Op::uses_values)
          prefetch_walks<W>(yp + f, scan_block), prefetch_walks<W>(xp + f, scan_block);
      }
      load_transposed<W>(z, gz + o, scan_block);
      if constexpr (!Op::uses_values) {
        for (int e = W - 1; e >= 0; --e)
          out[e] = c = z[e] + c;
      } else {
        load_transposed<W>(yv, yp + o, scan_block);
        load_transposed<W>(xv, xp + o, scan_block);
        for (int e = W - 1; e >= 0; --e) {
          V const sj = z[e] + c;
          V dprev, dx;
          Op::lanes_partials(yv[e], xv[e], dprev, dx);
          out[e] = times_cotangent_lanes(sj, dx);
          c = times_cotangent_lanes(sj, dprev);
        }
      }
      store_transposed<W>(gp + o, scan_block, out);
    }
    for (int g = 0; g < W; ++g) {
      T cg = c[g];
      for (index_t i = rounds * W; i < steps; ++i)
        step(p[g], p[g].j1 - 1 - i, cg);
      finish(p[g], cg);
    }
  }
  // NV * W pieces side by side (pieces_side_by_side), piece v * W + g in lane g of vector v:
  // step i reads NV vectors of each array and writes NV of the adjoint.
  template <int W, int NV>
  void columns_group(scan_piece const *p, index_t steps, T const *c0) const {
    using V = walk_vector<T, W>;
    index_t const s = a.rows.inner, ex = a.exclusive ? 1 : 0, j1 = p[0].j1;
    // z_j and x_j at j * s from gz and xp; y_(j - 1) (exclusive: y_j) at (j - 1) * s from yp,
    // read for j >= 1 only
    T const *gz = a.gy + p[0].base + ex * s, *yp = nullptr, *xp = nullptr;
    T *gp = gx + p[0].base;
    if constexpr (Op::uses_values)
      yp = a.y + p[0].base + ex * s, xp = a.x + p[0].base;
    V c[NV];
    for (int v = 0; v < NV; ++v)
      for (int g = 0; g < W; ++g)
        c[v][g] = c0[v * W + g];
    constexpr int line = 64 / int(sizeof(T));
    for (index_t i = 0; i < steps; ++i) {
      index_t const j = j1 - 1 - i, at = j * s;
      index_t const f = (i + columns_ahead < steps ? j - columns_ahead : j) * s;
      for (int e = 0; e < NV * W; e += line) {
        __builtin_prefetch(gz + f + e);
        if constexpr (Op::uses_values)
          __builtin_prefetch(yp + f - s + e), __builtin_prefetch(xp + f + e);
      }
      for (int v = 0; v < NV; ++v) {
        V const z = load_walk<W>(gz + at + v * W);
        if constexpr (!Op::uses_values) {
          c[v] = z + c[v];
          store_walk(gp + at + v * W, c[v]);
        } else {
          V const sj = z + c[v];
          V dprev, dx;
          Op::lanes_partials(load_walk<W>(yp + at - s + v * W), load_walk<W>(xp + at + v * W),
                             dprev, dx);
          store_walk(gp + at + v * W, times_cotangent_lanes(sj, dx));
          c[v] = times_cotangent_lanes(sj, dprev);
        }
      }
    }
    for (int v = 0; v < NV; ++v)
      for (int g = 0; g < W; ++g)
        finish(p[v * W + g], c[v][g]);
  }
#endif
};

// Whether a sum scan may run as the backend's device-wide primitive (backend_scan_sum: CUB's
// DeviceScan where cuda_primitives::scan chooses it): along the innermost axis, fewer than 16
// rows (where the own passes cut rows into pieces), a call per row.
template <class Op> bool scan_sum_elsewhere(scan_rows const &rows) {
  return is_scan_plus<Op>::value && rows.inner == 1 && rows.count() < 16;
}

template <class Ex, class T, class Op>
tensor<T> scan_forward(Ex const &ex, tensor<T> const &xc, scan_rows const &rows, bool exclusive,
                       T neutral, Op const &op) {
  auto y = tensor<T>::empty(xc.dims(), xc.dev());
  if (xc.size() == 0)
    return y;
  if (scan_sum_elsewhere<Op>(rows) &&
      backend_scan_sum(hook{}, ex, xc.data(), y.raw_data(), rows.count(), rows.n, exclusive, false))
    return y;
  index_t const blocks = scan_blocks(rows, rows.n), pieces = rows.count() * blocks;
  bool const innermost = rows.inner == 1;
  tensor<T> carry;
  if (blocks > 1) {
    carry = tensor<T>::empty({pieces}, xc.dev());
    for_each_piece(ex, innermost, pieces, scan_block,
                   scan_piece_reduce<T, Op>{xc.data(), carry.raw_data(), rows, blocks, op});
    parallel_for_rows(ex, rows.count(), blocks,
                      scan_piece_carries<T, Op>{carry.raw_data(), blocks, op});
  }
  for_each_piece(ex, innermost, pieces, rows.n / blocks,
                 scan_piece_forward<T, Op>{xc.data(), blocks > 1 ? carry.data() : nullptr,
                                           y.raw_data(), rows, blocks, exclusive, neutral, op});
  return y;
}

template <class Ex, class T, class Op>
void scan_backward(Ex const &ex, T const *x, T const *y, tensor<T> const &gy, tensor<T> const &gx,
                   scan_rows const &rows, bool exclusive, Op const &op) {
  // cumsum's adjoint, the reverse scan of gy (of gy shifted by one where exclusive)
  if (scan_sum_elsewhere<Op>(rows) &&
      backend_scan_sum(hook{}, ex, gy.data(), gx.raw_data(), rows.count(), rows.n, exclusive, true))
    return;
  index_t const m = rows.n - (exclusive ? 1 : 0);
  index_t const blocks = scan_blocks(rows, m), pieces = rows.count() * blocks;
  bool const innermost = rows.inner == 1;
  scan_adjoint_args<T, Op> const a{x, y, gy.data(), rows, m, blocks, exclusive, op};
  tensor<T> A;
  if (blocks > 1) {
    A = tensor<T>::empty({pieces}, gy.dev());
    auto B = tensor<T>::empty({pieces}, gy.dev());
    for_each_piece(ex, innermost, pieces, 2 * scan_block,
                   scan_piece_summary<T, Op>{a, A.raw_data(), B.raw_data()});
    parallel_for_rows(ex, rows.count(), blocks,
                      scan_piece_adjoint_carries<T>{A.raw_data(), B.data(), blocks});
  }
  for_each_piece(ex, innermost, pieces, 2 * rows.n / blocks,
                 scan_piece_adjoint<T, Op>{a, blocks > 1 ? A.data() : nullptr, gx.raw_data()});
}

// A scan on the tape: op a scan operator above.
// One function per element type and operator (not per operand expression); the compiled
// component holds those of cumsum / cumprod / cummax / cummin (dualcast/core/compiled.hpp).
template <class T, class Op>
var<T> scan_op(char const *name, var<T> const &v, Op const &op, T neutral, int axis,
               bool exclusive) {
  static_assert(std::is_trivially_copyable_v<Op>,
                "dualcast::scan: the operator must be trivially copyable (a lambda capturing "
                "values, not references)");
  int const ax = normalize_axis(name, axis, v.rank());
  scan_rows const rows = make_scan_rows(v.dims(), ax);
  return custom_op(
      std::string_view(name).substr(std::string_view("dualcast::").size()), // the node's name
      [&](auto const &ex, auto &ctx, tensor<T> const &xv) {
        tensor<T> xc = xv.contiguous();
        tensor<T> y = scan_forward(ex, xc, rows, exclusive, neutral, op);
        if constexpr (Op::uses_values) {
          ctx.save(xc, "input");
          ctx.save(y, "result");
        }
        return y;
      },
      [rows, exclusive, op](auto const &ex, auto const &ctx, auto &g) {
        if (!g.needs(0) || rows.count() * rows.n == 0)
          return;
        tensor<T> gy = g.out(0).contiguous();
        auto gx = tensor<T>::empty(gy.dims(), gy.dev());
        T const *xs = nullptr, *ys = nullptr;
        if constexpr (Op::uses_values)
          xs = ctx.saved(0).data(), ys = ctx.saved(1).data();
        scan_backward(ex, xs, ys, gy, gx, rows, exclusive, op);
        g.add(0, std::move(gx));
      },
      v);
}

template <class T, class Op>
tensor<T> scan_tensor(char const *name, tensor<T> const &x, Op const &op, T neutral, int axis,
                      bool exclusive) {
  int const ax = normalize_axis(name, axis, x.rank());
  scan_rows const rows = make_scan_rows(x.dims(), ax);
  return on_device(name, x.dev(), detail::ambient_cpu(), [&](auto const &ex) {
    return scan_forward(ex, x.contiguous(), rows, exclusive, neutral, op);
  });
}

template <class T> constexpr T scan_inf() { return std::numeric_limits<T>::infinity(); }

// cumsum on a tape over duals (host only): linear, so the plain scan (forward) and its adjoint
// (backward: the reverse cumulative sum) run on the value and on each partial apart -- the values
// are the plain tape's bits.
template <class D> var<D> cumsum_dual(var<D> const &v, int axis, bool exclusive) {
  using R = real_part_t<D>;
  int const ax = normalize_axis("dualcast::cumsum", axis, v.rank());
  scan_rows const rows = make_scan_rows(v.dims(), ax);
  return custom_op(
      "cumsum",
      [&](auto const &ex, auto &, tensor<D> const &xv) {
        return dual_componentwise(xv, [&](tensor<R> const &c) {
          return scan_forward(ex, c, rows, exclusive, R(0), scan_plus<R>{});
        });
      },
      [rows, exclusive](auto const &ex, auto const &, auto &g) {
        if (!g.needs(0) || rows.count() * rows.n == 0)
          return;
        g.add(0, dual_componentwise(g.out(0), [&](tensor<R> const &gy) {
                auto gx = tensor<R>::empty(gy.dims(), gy.dev());
                scan_backward(ex, static_cast<R const *>(nullptr), static_cast<R const *>(nullptr),
                              gy, gx, rows, exclusive, scan_plus<R>{});
                return gx;
              }));
      },
      v);
}

#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE var<T> scan_op<T, scan_plus<T>>(char const *, var<T> const &,               \
                                                       scan_plus<T> const &, T, int, bool);        \
  DUALCAST_INSTANTIATE var<T> scan_op<T, scan_times<T>>(char const *, var<T> const &,              \
                                                        scan_times<T> const &, T, int, bool);      \
  DUALCAST_INSTANTIATE var<T> scan_op<T, scan_extremum<T, true>>(                                  \
      char const *, var<T> const &, scan_extremum<T, true> const &, T, int, bool);                 \
  DUALCAST_INSTANTIATE var<T> scan_op<T, scan_extremum<T, false>>(                                 \
      char const *, var<T> const &, scan_extremum<T, false> const &, T, int, bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace detail

namespace detail {
// cummax / cummin on a tape over duals (host only): each output is the element the plain scan
// selects (y_j = op(y_(j-1), x_j) from y_(-1) = the neutral element, scan_extremum::takes on the
// values: the plain tape's values and ties), partials and all; backward adds each dual cotangent
// there, from the right as the plain adjoint does (so the gradient's values are its bits). One
// pass per row on the host, along the axis moved last.
template <bool Max, class D>
var<D> cumextremum_dual(char const *name, var<D> const &v, int axis, bool exclusive) {
  using R = real_part_t<D>;
  int const ax = normalize_axis(name, axis, v.rank());
  std::vector<int> perm;
  for (int d = 0; d < v.rank(); ++d)
    if (d != ax)
      perm.push_back(d);
  perm.push_back(ax);
  shape const ps = permuted_shape(v.dims(), perm);
  index_t const n = v.dims().ext[ax], rows = n > 0 ? v.size() / n : 0;
  // the position (in the permuted array) each output takes its element from, -1: the neutral one
  auto pos = std::make_shared<std::vector<index_t>>(std::size_t(v.size()));
  return custom_op(
      std::string_view(name).substr(std::string_view("dualcast::").size()),
      [&](auto const &, auto &, tensor<D> const &xv) {
        tensor<D> xp = xv.permuted(perm).contiguous();
        tensor<D> y = tensor<D>::empty(ps, xv.dev());
        D const *x = xp.data();
        D *yd = y.raw_data();
        R const neutral = Max ? -scan_inf<R>() : scan_inf<R>();
        for (index_t r = 0; r < rows; ++r) {
          R best = neutral;
          index_t at = -1;
          for (index_t e = r * n; e < (r + 1) * n; ++e) {
            index_t const before = at;
            if (scan_extremum<R, Max>::takes(best, x[e].val))
              best = x[e].val, at = e;
            index_t const p = exclusive ? before : at;
            (*pos)[std::size_t(e)] = p;
            yd[e] = p < 0 ? D(neutral) : x[p];
          }
        }
        return y.permuted(inverse_perm(perm));
      },
      [pos, perm, ps, n, rows](auto const &, auto const &, auto &g) {
        if (!g.needs(0))
          return;
        tensor<D> gy = g.out(0).permuted(perm).contiguous();
        tensor<D> gp = tensor<D>::zeros(ps, gy.dev());
        D const *gyd = gy.data();
        D *gd = gp.raw_data();
        for (index_t r = 0; r < rows; ++r)
          for (index_t e = (r + 1) * n - 1; e >= r * n; --e) {
            index_t const p = (*pos)[std::size_t(e)];
            if (p < 0)
              continue;
            bool const first = e == (r + 1) * n - 1 || (*pos)[std::size_t(e + 1)] != p;
            gd[p] = first ? gyd[e] : gyd[e] + gd[p];
          }
        g.add(0, gp.permuted(inverse_perm(perm)));
      },
      v);
}
} // namespace detail

// ---- on tape variables and lazy expressions ----------------------------------------------------
template <var_like X> auto cumsum(X const &x, int axis = -1, bool exclusive = false) {
  DUALCAST_REFUSE_FLOAT16("cumsum", X);
  using T = typename detail::var_of_t<X>::value_type;
  if constexpr (is_dual_v<T>)
    return detail::cumsum_dual(detail::as_var(x), axis, exclusive);
  else
    return detail::scan_op("dualcast::cumsum", detail::as_var(x), detail::scan_plus<T>{}, T(0),
                           axis, exclusive);
}
template <var_like X> auto cumprod(X const &x, int axis = -1, bool exclusive = false) {
  DUALCAST_REFUSE_FLOAT16("cumprod", X);
  static_assert(detail::plain_operand<X>(),
                "dualcast::cumprod: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  using T = typename detail::var_of_t<X>::value_type;
  return detail::scan_op("dualcast::cumprod", detail::as_var(x), detail::scan_times<T>{}, T(1),
                         axis, exclusive);
}
template <var_like X> auto cummax(X const &x, int axis = -1, bool exclusive = false) {
  DUALCAST_REFUSE_FLOAT16("cummax", X);
  using T = typename detail::var_of_t<X>::value_type;
  if constexpr (is_dual_v<T>)
    return detail::cumextremum_dual<true>("dualcast::cummax", detail::as_var(x), axis, exclusive);
  else
    return detail::scan_op("dualcast::cummax", detail::as_var(x), detail::scan_extremum<T, true>{},
                           -detail::scan_inf<T>(), axis, exclusive);
}
template <var_like X> auto cummin(X const &x, int axis = -1, bool exclusive = false) {
  DUALCAST_REFUSE_FLOAT16("cummin", X);
  using T = typename detail::var_of_t<X>::value_type;
  if constexpr (is_dual_v<T>)
    return detail::cumextremum_dual<false>("dualcast::cummin", detail::as_var(x), axis, exclusive);
  else
    return detail::scan_op("dualcast::cummin", detail::as_var(x), detail::scan_extremum<T, false>{},
                           detail::scan_inf<T>(), axis, exclusive);
}
// A scan with an associative operator of your own (see the file comment); `neutral` is the first
// element of an exclusive scan.
template <var_like X, class Op>
auto scan(X const &x, Op const &op, typename detail::var_of_t<X>::value_type neutral, int axis = -1,
          bool exclusive = false) {
  DUALCAST_REFUSE_FLOAT16("scan", X);
  static_assert(detail::plain_operand<X>(),
                "dualcast::scan: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  using T = typename detail::var_of_t<X>::value_type;
  return detail::scan_op("dualcast::scan", detail::as_var(x), detail::scan_user<T, Op>{op}, neutral,
                         axis, exclusive);
}

// ---- on tensors: the values, on the tensor's device --------------------------------------------
template <class T> tensor<T> cumsum(tensor<T> const &x, int axis = -1, bool exclusive = false) {
  return detail::scan_tensor("dualcast::cumsum", x, detail::scan_plus<T>{}, T(0), axis, exclusive);
}
template <class T> tensor<T> cumprod(tensor<T> const &x, int axis = -1, bool exclusive = false) {
  return detail::scan_tensor("dualcast::cumprod", x, detail::scan_times<T>{}, T(1), axis,
                             exclusive);
}
template <class T> tensor<T> cummax(tensor<T> const &x, int axis = -1, bool exclusive = false) {
  return detail::scan_tensor("dualcast::cummax", x, detail::scan_extremum<T, true>{},
                             -detail::scan_inf<T>(), axis, exclusive);
}
template <class T> tensor<T> cummin(tensor<T> const &x, int axis = -1, bool exclusive = false) {
  return detail::scan_tensor("dualcast::cummin", x, detail::scan_extremum<T, false>{},
                             detail::scan_inf<T>(), axis, exclusive);
}
template <class T, class Op>
tensor<T> scan(tensor<T> const &x, Op const &op, std::type_identity_t<T> neutral, int axis = -1,
               bool exclusive = false) {
  return detail::scan_tensor("dualcast::scan", x, detail::scan_user<T, Op>{op}, neutral, axis,
                             exclusive);
}

} // namespace dualcast
