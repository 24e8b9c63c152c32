// dualcast/ops/reduce_op.hpp: a reduction over axes with an associative operator of your own,
// on tape variables and on tensors.
//
//   auto lse = [](auto a, auto b) { return dualcast::log(dualcast::exp(a) + dualcast::exp(b)); };
//   dualcast::reduce(x, lse, -INFINITY);              // all axes -> shape ()
//   dualcast::reduce(x, lse, -INFINITY, {1}, true);   // axis 1, keepdims
//
// `op(a, b)` must be associative (it need not be commutative: elements are combined in their
// order along the reduced axes, last axis fastest) and generic: the adjoint calls it on dual
// numbers (dualcast::dual<T, 1>), so write it with dualcast's math functions. `neutral` is the
// value of a reduction over no element; it is not used otherwise (op(neutral, x) is never
// formed). The operator is scalar: it combines two numbers (a 2x2 matrix product, say, does not
// fit; scan pairs of numbers with dualcast::linear_recurrence where that is what it is).
//
// Adjoint (Futhark's rule for a general operator): with l_i = x_0 op ... op x_(i-1) and
// r_i = x_(i+1) op ... op x_(n-1), the exclusive scans from both sides, x_i receives
// ybar * d(l_i op x_i op r_i) / d x_i, the derivative from one evaluation on dual numbers.
//
// Work: forward one op per element (blocks of a fixed length in parallel, then the blocks of each
// group in order, so the result is the same at any number of threads; on CUDA a warp per block,
// another association: the same value up to rounding); backward about five op evaluations per
// element (three on numbers, two on duals), blocks in parallel. Linear.
#pragma once

#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/ops/lane_scan.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <type_traits>
#include <vector>

namespace dualcast {

namespace detail {

// The element range [i0, i1) of block k = (group g, block b) within the groups of n elements.
struct block_range {
  index_t g, b, i0, i1;
};
DUALCAST_HD inline block_range block_of(index_t k, index_t n, index_t blocks) {
  index_t const g = k / blocks, b = k % blocks;
  index_t const i0 = b * reduce_block;
  index_t const i1 = n - i0 < reduce_block ? n : i0 + reduce_block;
  return {g, b, g * n + i0, g * n + i1};
}

// The passes are row operations over lanes (lane_scan.hpp): one lane combines a block's
// elements in order (the CPU), a CUDA warp 32 neighbouring elements at a time, scanned over its
// lanes in order (op need not be commutative) -- one thread per block of 4096 was the GPU's
// first version.

// op with its operands swapped: a walk from the right combines op(x, acc).
template <class Op> struct op_flipped {
  Op op;
  template <class A> DUALCAST_HD A operator()(A a, A b) const { return op(b, a); }
};

// part[k] = the reduction of block k (non-empty).
template <class T, class Op> struct op_blocks {
  T const *x;
  T *part;
  index_t n, blocks;
  Op op;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    block_range const r = block_of(k, n, blocks);
    T const total = lane_scan<false>(
        lanes, r.i0, r.i1, false, T(0), op, [&](index_t i) { return x[i]; }, [](index_t, T, T) {});
    if (lanes.lane() == 0)
      part[k] = total;
  }
};
// y[g] = the blocks of group g combined in order (neutral for a group of no element).
template <class T, class Op> struct op_groups {
  T const *part;
  T *y;
  index_t blocks;
  T neutral;
  Op op;
  template <class Lanes> DUALCAST_HD void operator()(index_t g, Lanes const &lanes) const {
    T const total =
        blocks == 0 ? neutral
                    : lane_scan<false>(
                          lanes, 0, blocks, false, T(0), op,
                          [&](index_t b) { return part[g * blocks + b]; }, [](index_t, T, T) {});
    if (lanes.lane() == 0)
      y[g] = total;
  }
};
// Per group, the exclusive scans of its blocks' reductions from both sides: left[k] combines the
// blocks before block k, right[k] those after it (undefined for the first / last block).
template <class T, class Op> struct op_block_scans {
  T const *part;
  T *left, *right;
  index_t blocks;
  Op op;
  template <class Lanes> DUALCAST_HD void operator()(index_t g, Lanes const &lanes) const {
    T const *p = part + g * blocks;
    T *l = left + g * blocks, *r = right + g * blocks;
    lane_scan<true>(
        lanes, 0, blocks, false, T(0), op, [&](index_t b) { return p[b]; },
        [&](index_t b, T before, T) {
          if (b > 0)
            l[b] = before;
        });
    index_t const last = blocks - 1; // walk i from the right: block last - i
    lane_scan<true>(
        lanes, 0, blocks, false, T(0), op_flipped<Op>{op}, [&](index_t i) { return p[last - i]; },
        [&](index_t i, T before, T) {
          if (i > 0)
            r[last - i] = before;
        });
  }
};
// The adjoint over block k: gx_i = gy[g] * d(l_i op x_i op r_i) / d x_i. The block's own
// exclusive suffixes go first into gx (each read, by the lane that owns element i, before its
// gradient overwrites it).
template <class T, class Op> struct op_adjoint {
  T const *x, *left, *right, *gy;
  T *gx;
  index_t n, blocks;
  Op op;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    using D = dual<T, 1>;
    block_range const r = block_of(k, n, blocks);
    index_t const last = r.i1 - 1; // suffixes: walk i from the right, element last - i
    lane_scan<true>(
        lanes, 0, r.i1 - r.i0, false, T(0), op_flipped<Op>{op},
        [&](index_t i) { return x[last - i]; },
        [&](index_t i, T before, T) {
          if (i > 0)
            gx[last - i] = before;
        });
    lanes.sync(); // (the suffixes were written by other lanes)
    bool const after = r.b + 1 < blocks, before = r.b > 0;
    T const ybar = gy[r.g];
    lane_scan<true>(
        lanes, r.i0, r.i1, before, before ? left[k] : T(0), op, [&](index_t i) { return x[i]; },
        [&](index_t i, T l, T) {
          bool const has_l = before || i > r.i0;
          bool const in_block = i + 1 < r.i1;
          T rv = T(0);
          if (in_block)
            rv = after ? op(gx[i], right[k]) : gx[i];
          else if (after)
            rv = right[k];
          D f = D::variable(x[i], 0);
          if (has_l)
            f = op(D(l), f);
          if (in_block || after)
            f = op(f, D(rv));
          gx[i] = times_cotangent(ybar, f.d[0]);
        });
  }
};

template <class T> struct op_reduce_result { tensor<T> y, part; };
template <class Ex, class T, class Op>
op_reduce_result<T> reduce_forward(Ex const &ex, tensor<T> const &xp, Op const &op, T neutral,
                                   reduce_groups const &gr) {
  device const dev = xp.dev();
  index_t const nk = gr.n_out * gr.blocks;
  op_reduce_result<T> r{tensor<T>::empty(gr.kd, dev), tensor<T>::empty({nk}, dev)};
  if (nk > 0)
    parallel_for_rows(ex, nk, reduce_block,
                      op_blocks<T, Op>{xp.data(), r.part.raw_data(), gr.n_red, gr.blocks, op});
  if (gr.n_out > 0)
    parallel_for_rows(ex, gr.n_out, gr.blocks + 1,
                      op_groups<T, Op>{r.part.data(), r.y.raw_data(), gr.blocks, neutral, op});
  r.y = r.y.reshape(gr.out);
  return r;
}

} // namespace detail

// The reduction over `axes` (all when empty) of a tensor with op: its value, on its device.
template <class T, class Op>
tensor<T> reduce(tensor<T> const &x, Op const &op, std::type_identity_t<T> neutral,
                 std::vector<int> const &axes = {}, bool keepdims = false) {
  auto const gr = detail::make_reduce_groups("dualcast::reduce", x.dims(), axes, keepdims);
  return detail::on_device("dualcast::reduce", x.dev(), detail::ambient_cpu(), [&](auto const &ex) {
    return detail::reduce_forward(ex, x.permuted(gr.perm).contiguous(), op, neutral, gr).y;
  });
}

// The reduction over `axes` (all when empty) of a tape variable or lazy expression with op.
template <var_like X, class Op>
auto reduce(X const &x, Op const &op, typename detail::var_of_t<X>::value_type neutral,
            std::vector<int> const &axes = {}, bool keepdims = false) {
  DUALCAST_REFUSE_FLOAT16("reduce", X);
  static_assert(detail::plain_operand<X>(),
                "dualcast::reduce: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  using T = typename detail::var_of_t<X>::value_type;
  static_assert(std::is_trivially_copyable_v<Op>,
                "dualcast::reduce: the operator must be trivially copyable (a lambda capturing "
                "values, not references)");
  auto const &v = detail::as_var(x);
  auto const gr = detail::make_reduce_groups("dualcast::reduce", v.dims(), axes, keepdims);
  return custom_op(
      "reduce",
      [&](auto const &ex, auto &ctx, tensor<T> const &xv) {
        tensor<T> xp = xv.permuted(gr.perm).contiguous();
        auto r = detail::reduce_forward(ex, xp, op, neutral, gr);
        ctx.save(xp, "input");
        ctx.save(r.part, "reductions of the blocks");
        return r.y;
      },
      [gr, op](auto const &ex, auto const &ctx, auto &g) {
        index_t const nk = gr.n_out * gr.blocks;
        if (!g.needs(0) || nk == 0)
          return;
        tensor<T> gy = g.out(0).contiguous();
        device const dev = gy.dev();
        auto left = tensor<T>::empty({nk}, dev), right = tensor<T>::empty({nk}, dev);
        detail::parallel_for_rows(ex, gr.n_out, gr.blocks,
                                  detail::op_block_scans<T, Op>{ctx.saved(1).data(),
                                                                left.raw_data(), right.raw_data(),
                                                                gr.blocks, op});
        auto gp = tensor<T>::empty(gr.ps, dev);
        detail::parallel_for_rows(ex, nk, 5 * detail::reduce_block,
                                  detail::op_adjoint<T, Op>{ctx.saved(0).data(), left.data(),
                                                            right.data(), gy.data(), gp.raw_data(),
                                                            gr.n_red, gr.blocks, op});
        g.add(0, gp.permuted(gr.inv));
      },
      v);
}

} // namespace dualcast
