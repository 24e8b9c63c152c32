// dualcast/ops/linear_recurrence.hpp: the first-order linear recurrence along one axis,
//   h_t = a_t * h_(t-1) + b_t,   h_(-1) = h0 (0 when not given),
// elementwise over the other axes (the scan of RNN-like models: gated linear units, state space
// models), on tape variables and on tensors.
//
//   auto h = dualcast::linear_recurrence(a, b, 1);       // along axis 1, h0 = 0
//   auto h = dualcast::linear_recurrence(a, b, h0, 1);   // h0: a's shape without axis 1
//
// a and b broadcast to one shape (the result's); h0 broadcasts to that shape without the axis.
// Gradients for a, b and h0 (summed over broadcast dimensions). The adjoint is the same
// recurrence run backwards: s_t = hbar_t + a_(t+1) s_(t+1), then abar_t = s_t h_(t-1),
// bbar_t = s_t, h0bar = a_0 s_0. No division: exact where any a_t is 0.
//
// Work: forward and backward one pass each (a fused multiply-add per element). Rows (positions of
// the other axes) run in parallel, each row sequentially; fewer than 16 rows longer than 8192
// elements are split into pieces that run in parallel too (two passes each way, see below). On
// the CPU a thread walks 8 (forward) or 4 (backward) rows or pieces in lockstep, each exactly as
// alone (lane_scan.hpp): forward + backward, float, 2 threads: (1000, 64, 128) along axis 0
// 376 -> 113 ms, (64, 1000, 128) along axis 1 127 -> 59 ms, 10^7 elements 36 -> 22 ms. Rows
// side by side in memory (any axis but the last) walk in the lanes of vectors instead, 8
// vectors' worth per step (lane_scan.hpp: by_columns; the same bits): (1000, 8192) along axis 0,
// forward / backward 23 / 91-93 -> 5.0-6.0 / 9.8-10.0 ms.
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/ops/lane_scan.hpp>
#include <dualcast/ops/vector_walks.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <string>
#include <type_traits>
#include <utility>

namespace dualcast {

namespace detail {

// Like the scans (ops/scan.hpp), fewer than 16 rows longer than 8192 elements are split into
// pieces along the axis (groups.hpp: scan_blocks, piece_of): one row of 10^7 ran on one thread,
// 0.57 s on an H200. Each piece is an affine map of the value entering it: forward
// h_out = A h_in + B (A the product of its a_t), backward from the right likewise; the maps are
// chained per row in order, then each piece reruns from its carry. blocks == 1 runs the rows as
// before, the same bits; a split row rounds differently (A h_in + B is not the running sum).

// Each pass is a row operation over lanes, as the scans' (ops/scan.hpp): one lane walks its piece
// element by element (the CPU; CUDA where the axis is not the innermost), a warp 32 neighbouring
// elements at a time, composing the elements' maps h -> a h + b over its lanes (lane_scan.hpp:
// linear, affine).

// The CPU's passes over whole rows take this many per call: columns_vectors vectors' worth
// (rows side by side walk in the lanes of vectors, lane_scan.hpp: by_columns), else the
// lockstep's `walks`.
template <class T> constexpr int recurrence_group_size(int walks) {
#if DUALCAST_HAS_SIMD
  if constexpr (native_width<T> >= lockstep_narrow)
    return columns_vectors * native_width<T> > walks ? columns_vectors * native_width<T> : walks;
#endif
  return walks;
}

// Forward over piece k (the whole row r = k when blocks == 1), from the h entering it: the
// carry, or h0 (null: 0).
template <class T> struct recurrence_forward {
  T const *a, *b, *h0;
  T *h;
  scan_rows rows;
  index_t blocks = 1;
  T const *carry = nullptr;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(rows, rows.n, blocks, k);
    index_t const s = rows.inner;
    T acc = blocks > 1 ? carry[k] : (h0 ? h0[p.r] : T(0));
    if constexpr (Lanes::count() > 1) {
      lane_scan<false>(
          lanes, p.j0, p.j1, true, linear<T>{T(1), T(0)}, then_linear<T>{},
          [&](index_t j) {
            return linear<T>{a[p.base + j * s], b[p.base + j * s]};
          },
          [&](index_t j, linear<T>, linear<T> after) { h[p.base + j * s] = after(acc); });
    } else {
      for (index_t j = p.j0; j < p.j1; ++j) {
        index_t const e = p.base + j * s;
        acc = a[e] * acc + b[e];
        h[e] = acc;
      }
    }
  }
  // The CPU's pieces k0 .. k0 + count - 1: side by side in memory (rows along an outer axis) in
  // the lanes of vectors (below, lane_scan.hpp: by_columns), else 8 at a time in lockstep
  // (lane_scan.hpp); each as the loop above.
  static constexpr int group_size = recurrence_group_size<T>(lockstep_wide);
  static constexpr int contiguous_group_size = lockstep_wide;
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    columns_or_lockstep<group_size, simd_lanes<T>, lockstep_wide>(*this, rows, blocks, k0, count);
  }
  DUALCAST_FLATTEN void lockstep_group(index_t k0, index_t count) const {
    constexpr int G = lockstep_wide;
    index_t const s = rows.inner, skew = lockstep_skew_of(rows);
    T const *ap[G], *bp[G];
    T *hp[G];
    index_t steps[G];
    T acc[G];
    each_of<G>([&](auto g) {
      index_t const k = group_piece(k0, g, count);
      scan_piece const p = piece_of(rows, rows.n, blocks, k);
      index_t const e0 = p.base + p.j0 * s;
      ap[g] = a + e0, bp[g] = b + e0, hp[g] = h + e0;
      steps[g] = p.j1 - p.j0;
      acc[g] = blocks > 1 ? carry[k] : (h0 ? h0[p.r] : T(0));
    });
    lockstep<G>(0, steps, count, skew, [&](auto g, index_t i) {
      acc[g] = ap[g][i * s] * acc[g] + bp[g][i * s];
      hp[g][i * s] = acc[g];
    });
  }
#if DUALCAST_HAS_SIMD
  // NV * W pieces side by side, piece v * W + g in lane g of vector v: step i reads NV vectors of
  // a and b and writes NV of h.
  template <int W, int NV> void columns_group(index_t k0, scan_piece const *p) const {
    using V = walk_vector<T, W>;
    index_t const s = rows.inner, steps = p[0].j1 - p[0].j0, e0 = p[0].base + p[0].j0 * s;
    V acc[NV];
    for (int v = 0; v < NV; ++v)
      for (int g = 0; g < W; ++g) {
        index_t const q = v * W + g;
        acc[v][g] = blocks > 1 ? carry[k0 + q] : (h0 ? h0[p[q].r] : T(0));
      }
    constexpr int line = 64 / int(sizeof(T));
    for (index_t i = 0; i < steps; ++i) {
      index_t const e = e0 + i * s,
                    f = e0 + (i + columns_ahead < steps ? i + columns_ahead : i) * s;
      for (int q = 0; q < NV * W; q += line)
        __builtin_prefetch(a + f + q), __builtin_prefetch(b + f + q);
      for (int v = 0; v < NV; ++v) {
        acc[v] = load_walk<W>(a + e + v * W) * acc[v] + load_walk<W>(b + e + v * W);
        store_walk(h + e + v * W, acc[v]);
      }
    }
  }
#endif
};
// Forward, pass 1 of a split row: piece k as h_out = A[k] h_in + B[k].
template <class T> struct recurrence_piece_map {
  T const *a, *b;
  T *A, *B;
  scan_rows rows;
  index_t blocks;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(rows, rows.n, blocks, k);
    index_t const s = rows.inner;
    linear<T> f{T(1), T(0)};
    if constexpr (Lanes::count() > 1) {
      f = lane_scan<false>(
          lanes, p.j0, p.j1, true, f, then_linear<T>{},
          [&](index_t j) {
            return linear<T>{a[p.base + j * s], b[p.base + j * s]};
          },
          [](index_t, linear<T>, linear<T>) {});
    } else {
      for (index_t j = p.j0; j < p.j1; ++j) {
        index_t const e = p.base + j * s;
        f.a = a[e] * f.a;
        f.b = a[e] * f.b + b[e];
      }
    }
    if (lanes.lane() == 0)
      A[k] = f.a, B[k] = f.b;
  }
  // The CPU's pieces k0 .. k0 + count - 1 at once (lane_scan.hpp, lockstep): the loop above each.
  static constexpr int group_size = lockstep_wide;
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    constexpr int G = group_size;
    index_t const s = rows.inner, skew = lockstep_skew_of(rows);
    T const *ap[G], *bp[G];
    index_t steps[G];
    T fa[G], fb[G];
    each_of<G>([&](auto g) {
      scan_piece const p = piece_of(rows, rows.n, blocks, group_piece(k0, g, count));
      index_t const e0 = p.base + p.j0 * s;
      ap[g] = a + e0, bp[g] = b + e0;
      steps[g] = p.j1 - p.j0;
      fa[g] = T(1), fb[g] = T(0);
    });
    lockstep<G>(0, steps, count, skew, [&](auto g, index_t i) {
      T const ai = ap[g][i * s];
      fa[g] = ai * fa[g];
      fb[g] = ai * fb[g] + bp[g][i * s];
    });
    each_of<G>([&](auto g) {
      if (g < count)
        A[k0 + g] = fa[g], B[k0 + g] = fb[g];
    });
  }
};
// Forward, pass 2, row r: A[k] becomes the h entering piece k (h0, or 0, for the first).
template <class T> struct recurrence_piece_carries {
  T *A;
  T const *B, *h0;
  index_t blocks;
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    T const c0 = h0 ? h0[r] : T(0);
    if constexpr (Lanes::count() > 1) {
      index_t const first = r * blocks;
      lane_scan<true>(
          lanes, 0, blocks, true, linear<T>{T(1), T(0)}, then_linear<T>{},
          [&](index_t i) {
            return linear<T>{A[first + i], B[first + i]};
          },
          [&](index_t i, linear<T> before, linear<T>) { A[first + i] = before(c0); });
    } else {
      T c = c0;
      for (index_t k = r * blocks; k < (r + 1) * blocks; ++k) {
        T const next = A[k] * c + B[k];
        A[k] = c;
        c = next;
      }
    }
  }
};

// The adjoint over piece k (the whole row when blocks == 1), backwards from the carry entering
// it from the right (a_(t+1) s_(t+1); 0 at the row's end). Any of ga, gb, gh0 may be null (not
// needed); gh0 is written here only when the row is one piece.
template <class T> struct recurrence_adjoint {
  T const *a, *h0, *h, *gh;
  T *ga, *gb, *gh0;
  scan_rows rows;
  index_t blocks = 1;
  T const *carry_in = nullptr;
  // s_t at element j from the carry entering it, and the gradients of a_t and b_t there.
  DUALCAST_HD T element(scan_piece const &p, index_t j, T carry) const {
    index_t const s = rows.inner, e = p.base + j * s;
    T const st = gh[e] + carry;
    T const prev = j > 0 ? h[e - s] : (h0 ? h0[p.r] : T(0));
    if (ga)
      ga[e] = times_cotangent(st, prev);
    if (gb)
      gb[e] = st;
    return st;
  }
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(rows, rows.n, blocks, k);
    index_t const s = rows.inner;
    T carry = blocks > 1 ? carry_in[k] : T(0); // a_(t+1) s_(t+1)
    if constexpr (Lanes::count() > 1) {        // walk i: element j = j1 - 1 - i
      T const c0 = carry;
      carry = lane_scan<true>(
          lanes, 0, p.j1 - p.j0, true, affine<T>{T(1), T(0)}, then_affine<T>{},
          [&](index_t i) {
            index_t const e = p.base + (p.j1 - 1 - i) * s;
            return affine<T>{a[e], times_cotangent(gh[e], a[e])};
          },
          [&](index_t i, affine<T> before, affine<T>) { element(p, p.j1 - 1 - i, before(c0)); })(
          c0);
    } else {
      for (index_t j = p.j1 - 1; j >= p.j0; --j)
        carry = times_cotangent(element(p, j, carry), a[p.base + j * s]);
    }
    if (gh0 && blocks == 1 && lanes.lane() == 0)
      gh0[p.r] = carry;
  }
  // The CPU's pieces k0 .. k0 + count - 1: side by side in memory (rows along an outer axis) in
  // the lanes of vectors (below, lane_scan.hpp: by_columns), else 4 at a time in lockstep
  // (lane_scan.hpp); each as the loop above, step i element j1 - 1 - i.
  static constexpr int group_size = recurrence_group_size<T>(lockstep_narrow);
  static constexpr int contiguous_group_size = lockstep_narrow;
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    columns_or_lockstep<group_size, simd_lanes<T>, lockstep_narrow>(*this, rows, blocks, k0, count);
  }
#if DUALCAST_HAS_SIMD
  // NV * W pieces side by side, piece v * W + g in lane g of vector v: element(), lane by lane,
  // NV vectors per step.
  template <int W, int NV> void columns_group(index_t k0, scan_piece const *p) const {
    using V = walk_vector<T, W>;
    index_t const s = rows.inner, j0 = p[0].j0, j1 = p[0].j1, base = p[0].base;
    V carry[NV], first_prev[NV]; // first_prev: the h before element 0 (h0, or 0)
    for (int v = 0; v < NV; ++v)
      for (int g = 0; g < W; ++g) {
        index_t const q = v * W + g;
        carry[v][g] = blocks > 1 ? carry_in[k0 + q] : T(0);
        first_prev[v][g] = h0 ? h0[p[q].r] : T(0);
      }
    constexpr int line = 64 / int(sizeof(T));
    for (index_t j = j1 - 1; j >= j0; --j) {
      index_t const e = base + j * s,
                    f = base + (j - columns_ahead >= j0 ? j - columns_ahead : j) * s;
      for (int q = 0; q < NV * W; q += line) {
        __builtin_prefetch(gh + f + q), __builtin_prefetch(a + f + q);
        if (ga && f >= s)
          __builtin_prefetch(h + f - s + q);
      }
      for (int v = 0; v < NV; ++v) {
        index_t const ev = e + v * W;
        V const st = load_walk<W>(gh + ev) + carry[v];
        if (ga)
          store_walk(ga + ev,
                     times_cotangent_lanes(st, j > 0 ? load_walk<W>(h + ev - s) : first_prev[v]));
        if (gb)
          store_walk(gb + ev, st);
        carry[v] = times_cotangent_lanes(st, load_walk<W>(a + ev));
      }
    }
    if (gh0 && blocks == 1)
      for (int v = 0; v < NV; ++v)
        for (int g = 0; g < W; ++g)
          gh0[p[v * W + g].r] = carry[v][g];
  }
#endif
  DUALCAST_FLATTEN void lockstep_group(index_t k0, index_t count) const {
    constexpr int G = lockstep_narrow;
    index_t const s = rows.inner, skew = lockstep_skew_of(rows);
    scan_piece p[G];
    index_t steps[G];
    T carry[G];
    each_of<G>([&](auto g) {
      index_t const k = group_piece(k0, g, count);
      p[g] = piece_of(rows, rows.n, blocks, k);
      steps[g] = p[g].j1 - p[g].j0;
      carry[g] = blocks > 1 ? carry_in[k] : T(0);
    });
    lockstep<G>(0, steps, count, skew, [&](auto g, index_t i) {
      index_t const j = p[g].j1 - 1 - i;
      carry[g] = times_cotangent(element(p[g], j, carry[g]), a[p[g].base + j * s]);
    });
    each_of<G>([&](auto g) {
      if (gh0 && blocks == 1 && g < count)
        gh0[p[g].r] = carry[g];
    });
  }
};
// Backward, pass 1 of a split row: piece k as carry_out = A[k] carry_in + B[k].
template <class T> struct recurrence_piece_adjoint_map {
  T const *a, *gh;
  T *A, *B;
  scan_rows rows;
  index_t blocks;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    scan_piece const p = piece_of(rows, rows.n, blocks, k);
    index_t const s = rows.inner;
    affine<T> f{T(1), T(0)};
    if constexpr (Lanes::count() > 1) {
      f = lane_scan<false>(
          lanes, 0, p.j1 - p.j0, true, f, then_affine<T>{},
          [&](index_t i) {
            index_t const e = p.base + (p.j1 - 1 - i) * s;
            return affine<T>{a[e], times_cotangent(gh[e], a[e])};
          },
          [](index_t, affine<T>, affine<T>) {});
    } else {
      for (index_t j = p.j1 - 1; j >= p.j0; --j) {
        index_t const e = p.base + j * s;
        f.a = a[e] * f.a;
        f.b = times_cotangent(gh[e] + f.b, a[e]);
      }
    }
    if (lanes.lane() == 0)
      A[k] = f.a, B[k] = f.b;
  }
  // The CPU's pieces k0 .. k0 + count - 1 at once (lane_scan.hpp, lockstep): the loop above
  // each; step i is element j1 - 1 - i.
  static constexpr int group_size = lockstep_narrow;
  DUALCAST_FLATTEN void group(index_t k0, index_t count) const {
    constexpr int G = group_size;
    index_t const s = rows.inner, skew = lockstep_skew_of(rows);
    T const *ap[G], *gp[G];
    index_t steps[G];
    T fa[G], fb[G];
    each_of<G>([&](auto g) {
      scan_piece const p = piece_of(rows, rows.n, blocks, group_piece(k0, g, count));
      index_t const e1 = p.base + (p.j1 - 1) * s; // the walk's first element
      ap[g] = a + e1, gp[g] = gh + e1;
      steps[g] = p.j1 - p.j0;
      fa[g] = T(1), fb[g] = T(0);
    });
    lockstep<G>(0, steps, count, skew, [&](auto g, index_t i) {
      T const ai = ap[g][-i * s];
      fa[g] = ai * fa[g];
      fb[g] = times_cotangent(gp[g][-i * s] + fb[g], ai);
    });
    each_of<G>([&](auto g) {
      if (g < count)
        A[k0 + g] = fa[g], B[k0 + g] = fb[g];
    });
  }
};
// Backward, pass 2, row r, right to left: A[k] becomes the carry entering piece k from the
// right; the carry leaving the first piece is h0's gradient.
template <class T> struct recurrence_piece_adjoint_carries {
  T *A;
  T const *B;
  T *gh0;
  index_t blocks;
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    T c = T(0);
    if constexpr (Lanes::count() > 1) { // walk i: piece k = r * blocks + blocks - 1 - i
      index_t const last = r * blocks + blocks - 1;
      c = lane_scan<true>(
          lanes, 0, blocks, true, affine<T>{T(1), T(0)}, then_affine<T>{},
          [&](index_t i) {
            return affine<T>{A[last - i], B[last - i]};
          },
          [&](index_t i, affine<T> before, affine<T>) { A[last - i] = before(T(0)); })(T(0));
    } else {
      for (index_t k = (r + 1) * blocks - 1; k >= r * blocks; --k) {
        T const next = times_cotangent(c, A[k]) + B[k];
        A[k] = c;
        c = next;
      }
    }
    if (gh0 && lanes.lane() == 0)
      gh0[r] = c;
  }
};

template <class Ex, class T>
tensor<T> recurrence_values(Ex const &ex, tensor<T> const &a, tensor<T> const &b,
                            tensor<T> const &h0, scan_rows const &rows) {
  auto h = tensor<T>::empty(a.dims(), a.dev());
  if (h.size() == 0)
    return h;
  T const *h0p = h0.defined() ? h0.data() : nullptr;
  recurrence_forward<T> fwd{a.data(), b.data(), h0p, h.raw_data(), rows};
  fwd.blocks = scan_blocks(rows, rows.n);
  bool const innermost = rows.inner == 1;
  if (fwd.blocks == 1) {
    for_each_piece(ex, innermost, rows.count(), 2 * rows.n, fwd);
    return h;
  }
  index_t const nk = rows.count() * fwd.blocks;
  auto A = tensor<T>::empty({nk}, a.dev()), B = tensor<T>::empty({nk}, a.dev());
  for_each_piece(
      ex, innermost, nk, 3 * scan_block,
      recurrence_piece_map<T>{a.data(), b.data(), A.raw_data(), B.raw_data(), rows, fwd.blocks});
  parallel_for_rows(ex, rows.count(), 2 * fwd.blocks,
                    recurrence_piece_carries<T>{A.raw_data(), B.data(), h0p, fwd.blocks});
  fwd.carry = A.data();
  for_each_piece(ex, innermost, nk, 2 * scan_block, fwd);
  return h;
}

// The shapes of one recurrence: the result's, and h0's (the result's without the axis).
struct recurrence_shapes {
  shape out, h0;
  int axis;
  scan_rows rows;
};
inline recurrence_shapes make_recurrence_shapes(shape const &a, shape const &b, int axis) {
  char const *op = "dualcast::linear_recurrence";
  recurrence_shapes r;
  shape const ab[] = {a, b};
  int const pos[] = {0, 1};
  r.out = broadcast_shapes(op, ab, pos, 2);
  r.axis = normalize_axis(op, axis, r.out.rank);
  r.h0 = drop_axis(r.out, r.axis);
  r.rows = make_scan_rows(r.out, r.axis);
  return r;
}

// h0 must broadcast to the result's shape without the scanned axis.
inline void check_h0(shape const &h0, shape const &want) {
  bool ok = true;
  if (!(broadcast_pair(h0, want, ok) == want) || !ok)
    throw shape_error("dualcast::linear_recurrence: h0 of shape " + to_string(h0) +
                      " does not broadcast to " + to_string(want) +
                      " (the result's shape without the scanned axis)");
}

template <class Ex, class T>
tensor<T> recurrence_tensor(Ex const &ex, tensor<T> const &a, tensor<T> const &b,
                            tensor<T> const &h0, recurrence_shapes const &rs) {
  tensor<T> h0c;
  if (h0.defined())
    h0c = h0.broadcast_to(rs.h0).contiguous();
  return recurrence_values(ex, a.broadcast_to(rs.out).contiguous(),
                           b.broadcast_to(rs.out).contiguous(), h0c, rs.rows);
}

template <class T> struct recurrence_backward {
  recurrence_shapes rs;
  bool has_h0;
  template <class Ex, class Ctx, class G>
  void operator()(Ex const &ex, Ctx const &ctx, G &g) const {
    if (rs.out.size() == 0)
      return;
    device const dev = ctx.saved(0).dev();
    tensor<T> gh = g.out(0).contiguous();
    tensor<T> ga, gb, gh0;
    if (g.needs(0))
      ga = tensor<T>::empty(rs.out, dev);
    if (g.needs(1))
      gb = tensor<T>::empty(rs.out, dev);
    if (has_h0 && g.needs(2))
      gh0 = tensor<T>::empty(rs.h0, dev);
    recurrence_adjoint<T> adj{ctx.saved(0).data(),
                              has_h0 ? ctx.saved(2).data() : nullptr,
                              ctx.saved(1).data(),
                              gh.data(),
                              ga.defined() ? ga.raw_data() : nullptr,
                              gb.defined() ? gb.raw_data() : nullptr,
                              gh0.defined() ? gh0.raw_data() : nullptr,
                              rs.rows};
    adj.blocks = scan_blocks(rs.rows, rs.rows.n);
    bool const innermost = rs.rows.inner == 1;
    if (adj.blocks == 1) {
      for_each_piece(ex, innermost, rs.rows.count(), 3 * rs.rows.n, adj);
    } else {
      index_t const nk = rs.rows.count() * adj.blocks;
      auto A = tensor<T>::empty({nk}, dev), B = tensor<T>::empty({nk}, dev);
      for_each_piece(ex, innermost, nk, 3 * scan_block,
                     recurrence_piece_adjoint_map<T>{adj.a, adj.gh, A.raw_data(), B.raw_data(),
                                                     rs.rows, adj.blocks});
      parallel_for_rows(
          ex, rs.rows.count(), 2 * adj.blocks,
          recurrence_piece_adjoint_carries<T>{A.raw_data(), B.data(), adj.gh0, adj.blocks});
      adj.carry_in = A.data();
      for_each_piece(ex, innermost, nk, 3 * scan_block, adj);
    }
    if (ga.defined())
      g.add(0, std::move(ga));
    if (gb.defined())
      g.add(1, std::move(gb));
    if (gh0.defined())
      g.add(2, std::move(gh0));
  }
};

} // namespace detail

// ---- on tape variables and lazy expressions ----------------------------------------------------
namespace detail {
// One function per element type (not per operand expression), which the compiled component holds
// (dualcast/core/compiled.hpp).
template <class T> var<T> linear_recurrence_var(var<T> const &av, var<T> const &bv, int axis) {
  auto const rs = detail::make_recurrence_shapes(av.dims(), bv.dims(), axis);
  return custom_op(
      "linear_recurrence",
      [&](auto const &ex, auto &ctx, tensor<T> const &at, tensor<T> const &bt) {
        tensor<T> ac = at.broadcast_to(rs.out).contiguous();
        tensor<T> h = detail::recurrence_values(ex, ac, bt.broadcast_to(rs.out).contiguous(),
                                                tensor<T>{}, rs.rows);
        ctx.save(ac, "a");
        ctx.save(h, "result");
        return h;
      },
      detail::recurrence_backward<T>{rs, false}, av, bv);
}
template <class T>
var<T> linear_recurrence_var(var<T> const &av, var<T> const &bv, var<T> const &hv, int axis) {
  auto const rs = detail::make_recurrence_shapes(av.dims(), bv.dims(), axis);
  detail::check_h0(hv.dims(), rs.h0);
  return custom_op(
      "linear_recurrence",
      [&](auto const &ex, auto &ctx, tensor<T> const &at, tensor<T> const &bt,
          tensor<T> const &ht) {
        tensor<T> ac = at.broadcast_to(rs.out).contiguous();
        tensor<T> hc = ht.broadcast_to(rs.h0).contiguous();
        tensor<T> h =
            detail::recurrence_values(ex, ac, bt.broadcast_to(rs.out).contiguous(), hc, rs.rows);
        ctx.save(ac, "a");
        ctx.save(h, "result");
        ctx.save(hc, "h0");
        return h;
      },
      detail::recurrence_backward<T>{rs, true}, av, bv, hv);
}
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE var<T> linear_recurrence_var<T>(var<T> const &, var<T> const &, int);       \
  DUALCAST_INSTANTIATE var<T> linear_recurrence_var<T>(var<T> const &, var<T> const &,             \
                                                       var<T> const &, int);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
} // namespace detail

template <var_like A, var_like B> auto linear_recurrence(A const &a, B const &b, int axis = -1) {
  DUALCAST_REFUSE_FLOAT16("linear_recurrence", A, B);
  static_assert(detail::plain_operand<A>(),
                "dualcast::linear_recurrence: not supported on a tape over duals (dual<T, K> "
                "elements) yet; docs/higher-order.md lists the operations that are");
  static_assert(std::is_same_v<typename detail::var_of_t<A>::value_type,
                               typename detail::var_of_t<B>::value_type>,
                "dualcast::linear_recurrence: operands of one element type");
  return detail::linear_recurrence_var(detail::as_var(a), detail::as_var(b), axis);
}
template <var_like A, var_like B, var_like H>
auto linear_recurrence(A const &a, B const &b, H const &h0, int axis = -1) {
  DUALCAST_REFUSE_FLOAT16("linear_recurrence", A, B, H);
  static_assert(detail::plain_operand<A>(),
                "dualcast::linear_recurrence: not supported on a tape over duals (dual<T, K> "
                "elements) yet; docs/higher-order.md lists the operations that are");
  using T = typename detail::var_of_t<A>::value_type;
  static_assert(std::is_same_v<T, typename detail::var_of_t<B>::value_type> &&
                    std::is_same_v<T, typename detail::var_of_t<H>::value_type>,
                "dualcast::linear_recurrence: operands of one element type");
  return detail::linear_recurrence_var(detail::as_var(a), detail::as_var(b), detail::as_var(h0),
                                       axis);
}

// ---- on tensors: the values, on their device ---------------------------------------------------
template <class T>
tensor<T> linear_recurrence(tensor<T> const &a, tensor<T> const &b, int axis = -1) {
  auto const rs = detail::make_recurrence_shapes(a.dims(), b.dims(), axis);
  detail::common_device("dualcast::linear_recurrence", a.dev(), b.dev());
  return detail::on_device(
      "dualcast::linear_recurrence", a.dev(), detail::ambient_cpu(),
      [&](auto const &ex) { return detail::recurrence_tensor(ex, a, b, tensor<T>{}, rs); });
}
template <class T>
tensor<T> linear_recurrence(tensor<T> const &a, tensor<T> const &b, tensor<T> const &h0,
                            int axis = -1) {
  auto const rs = detail::make_recurrence_shapes(a.dims(), b.dims(), axis);
  detail::check_h0(h0.dims(), rs.h0);
  detail::common_device("dualcast::linear_recurrence", a.dev(), b.dev());
  detail::common_device("dualcast::linear_recurrence", a.dev(), h0.dev());
  return detail::on_device(
      "dualcast::linear_recurrence", a.dev(), detail::ambient_cpu(),
      [&](auto const &ex) { return detail::recurrence_tensor(ex, a, b, h0, rs); });
}

} // namespace dualcast
