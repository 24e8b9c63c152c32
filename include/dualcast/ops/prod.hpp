// dualcast/ops/prod.hpp: the product over axes, on tape variables and on tensors.
//
//   dualcast::prod(x);                  // all axes -> shape ()
//   dualcast::prod(x, {0, 2}, true);    // axes 0 and 2, keepdims
//   dualcast::prod(t, {-1});            // a tensor<T>: the value only (no tape)
//
// Axes and keepdims as for dualcast::sum; the product over no element is 1. Zeros are counted,
// not multiplied: each group keeps its zero count z and the product p of its non-zero elements,
// its value is p where z == 0 and 0 (p * 0: NaN where p is NaN or inf) otherwise. The adjoint is
// the zero-count rule (Futhark): x_i gets ybar * p / x_i where z == 0, ybar * p (the product of
// the others) at the one zero where z == 1, and 0 everywhere else -- exact with any number of
// zeros, never a division by zero. (Where z == 0, p / x_i is the product of the others up to a
// rounding of p / x_i; it underflows to 0 or overflows to inf where p itself does.)
//
// Work: one pass forward over blocks of a fixed length (groups of any length run in parallel,
// and the result is the same at any number of threads; within a block SIMD lanes of running
// products on the CPU), one elementwise pass backward over the same blocks.
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/math/simd.hpp>
#include <dualcast/numbers/simd.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/ops/lane_scan.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <vector>

namespace dualcast {

namespace detail {

// Block k = (group g, block b) of x (groups of n contiguous elements): its zero count (at most
// 2: nothing needs more) and the product of its non-zero elements. The passes are row operations
// (parallel_for_rows): on the CPU one thread per block, in SIMD batches (lane l multiplies the
// elements i with i % W == l, so the multiplications are not one chain of dependent multiplies;
// the lanes are then multiplied in order, the tail after them); on CUDA a warp per block, lane l
// multiplying the elements i with i % 32 == l (neighbouring lanes read neighbouring elements;
// one thread per block of 4096 read 65 GB/s on an H200), the lanes' products then multiplied by
// the warp's butterfly.
template <class T> struct prod_blocks {
  T const *x;
  T *zeros, *part;
  index_t n, blocks;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    index_t const g = k / blocks, b = k % blocks;
    T const *p = x + g * n + b * reduce_block;
    index_t const m = n - b * reduce_block < reduce_block ? n - b * reduce_block : reduce_block;
    T prod = T(1), z = T(0); // z: the zero count (exact: at most reduce_block)
    if constexpr (Lanes::count() > 1) {
      for (index_t i = lanes.lane(); i < m; i += Lanes::count()) {
        if (p[i] == T(0))
          z += T(1);
        else
          prod *= p[i];
      }
      prod = lanes.reduce(prod, times_op<T>{});
      z = lanes.reduce(z, plus_op<T>{});
    } else {
      serial(p, m, prod, z);
    }
    if (lanes.lane() == 0) {
      zeros[k] = z < T(2) ? z : T(2);
      part[k] = prod;
    }
  }
  DUALCAST_HD static void serial(T const *p, index_t m, T &prod, T &z) {
    index_t i = 0;
#if DUALCAST_HAS_SIMD // (not under nvcc: see core/config.hpp)
    constexpr int W = native_width<T>;
    using B = batch<T, W>;
    B bp(T(1)), bz(T(0));
    for (; i + W <= m; i += W) {
      B const v = B::load(p + i);
      auto const zero = v == B(T(0));
      bz = bz + select(zero, B(T(1)), B(T(0)));
      bp = bp * select(zero, B(T(1)), v);
    }
    for (int l = 0; l < W; ++l)
      prod *= bp[l], z += bz[l];
#endif
    for (; i < m; ++i) {
      if (p[i] == T(0))
        z += T(1);
      else
        prod *= p[i];
    }
  }
};

// Group g: its blocks combined (one lane: in order); y = p where no zero, else p * 0.
template <class T> struct prod_groups {
  T const *zeros_in, *part;
  T *zeros, *p, *y;
  index_t blocks;
  template <class Lanes> DUALCAST_HD void operator()(index_t g, Lanes const &lanes) const {
    T z = T(0), q = T(1);
    for (index_t b = lanes.lane(); b < blocks; b += Lanes::count()) {
      z += zeros_in[g * blocks + b];
      q *= part[g * blocks + b];
    }
    z = lanes.reduce(z, plus_op<T>{});
    q = lanes.reduce(q, times_op<T>{});
    if (lanes.lane() == 0) {
      z = z < T(2) ? z : T(2);
      zeros[g] = z;
      p[g] = q;
      y[g] = z == T(0) ? q : q * T(0);
    }
  }
};
// The adjoint over block k = (group g, block b) (the zero-count rule): the group's zero count,
// product and cotangent read once, then one branch-free loop over the block's elements.
// With accumulate, added to gx (x's gradient itself: the same sums as adding a separate array).
template <class T> struct prod_adjoint {
  T const *x, *zeros, *p, *gy;
  T *gx;
  index_t n, blocks;
  bool accumulate = false;
  template <class Lanes> DUALCAST_HD void operator()(index_t k, Lanes const &lanes) const {
    index_t const g = k / blocks, b = k % blocks;
    index_t const at = g * n + b * reduce_block;
    index_t const m = n - b * reduce_block < reduce_block ? n - b * reduce_block : reduce_block;
    T const z = zeros[g], pg = p[g], yg = gy[g];
    T const *xb = x + at;
    T *gb = gx + at;
    // (elements lane, lane + count, ...: all of them with one lane)
    index_t const i0 = lanes.lane(), step = Lanes::count();
    if (accumulate)
      run(i0, step, m, z, pg, yg, xb, [gb](index_t i, T v) { gb[i] = gb[i] + v; });
    else
      run(i0, step, m, z, pg, yg, xb, [gb](index_t i, T v) { gb[i] = v; });
  }
  template <class Store>
  DUALCAST_HD static void run(index_t i0, index_t step, index_t m, T z, T pg, T yg, T const *xb,
                              Store const &store) {
    if (z == T(0))
      for (index_t i = i0; i < m; i += step)
        store(i, times_cotangent(yg, pg / xb[i]));
    else if (z == T(1))
      for (index_t i = i0; i < m; i += step)
        store(i, times_cotangent(yg, xb[i] == T(0) ? pg : T(0)));
    else
      for (index_t i = i0; i < m; i += step)
        store(i, times_cotangent(yg, T(0)));
  }
};

// The forward: y (of shape gr.out), and for backward the zero counts and non-zero products per
// group (of shape {n_out}).
template <class T> struct prod_result { tensor<T> y, zeros, p; };
template <class Ex, class T>
prod_result<T> prod_forward(Ex const &ex, tensor<T> const &xp, reduce_groups const &gr) {
  device const dev = xp.dev();
  index_t const nk = gr.n_out * gr.blocks;
  auto zb = tensor<T>::empty({nk}, dev), pb = tensor<T>::empty({nk}, dev);
  if (nk > 0)
    parallel_for_rows(ex, nk, reduce_block,
                      prod_blocks<T>{xp.data(), zb.raw_data(), pb.raw_data(), gr.n_red, gr.blocks});
  prod_result<T> r{tensor<T>::empty(gr.kd, dev), tensor<T>::empty({gr.n_out}, dev),
                   tensor<T>::empty({gr.n_out}, dev)};
  if (gr.n_out > 0)
    parallel_for_rows(ex, gr.n_out, gr.blocks + 1,
                      prod_groups<T>{zb.data(), pb.data(), r.zeros.raw_data(), r.p.raw_data(),
                                     r.y.raw_data(), gr.blocks});
  r.y = r.y.reshape(gr.out);
  return r;
}

} // namespace detail

// The product over `axes` (all when empty) of a tensor: its value, on the tensor's device.
template <class T>
tensor<T> prod(tensor<T> const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  static_assert(detail::plain_operand<tensor<T>>(),
                "dualcast::prod: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  auto const gr = detail::make_reduce_groups("dualcast::prod", x.dims(), axes, keepdims);
  return detail::on_device("dualcast::prod", x.dev(), detail::ambient_cpu(), [&](auto const &ex) {
    return detail::prod_forward(ex, x.permuted(gr.perm).contiguous(), gr).y;
  });
}

namespace detail {
// One function per element type (not per operand expression), which the compiled component holds
// (dualcast/core/compiled.hpp).
template <class T> var<T> prod_var(var<T> const &v, std::vector<int> const &axes, bool keepdims) {
  auto const gr = make_reduce_groups("dualcast::prod", v.dims(), axes, keepdims);
  return custom_op(
      "prod",
      [&](auto const &ex, auto &ctx, tensor<T> const &xv) {
        tensor<T> xp = xv.permuted(gr.perm).contiguous();
        auto r = prod_forward(ex, xp, gr);
        ctx.save(xp, "input");
        ctx.save(r.zeros, "zero counts");
        ctx.save(r.p, "products of the non-zero elements");
        return r.y;
      },
      [gr](auto const &ex, auto const &ctx, auto &g) {
        if (!g.needs(0) || gr.n_out * gr.n_red == 0)
          return;
        tensor<T> gy = g.out(0).contiguous();
        prod_adjoint<T> adj{ctx.saved(0).data(),
                            ctx.saved(1).data(),
                            ctx.saved(2).data(),
                            gy.data(),
                            nullptr,
                            gr.n_red,
                            gr.blocks};
        // Reduced axes last and a contiguous gradient: written (or added to) in place; else
        // through a temporary in the permuted order.
        bool const in_order = is_identity_perm(gr.perm);
        auto [t, acc] = in_order ? g.target(0) : std::pair<tensor<T>, bool>{};
        if (in_order && t.is_contiguous()) {
          adj.gx = t.raw_data();
          adj.accumulate = acc;
          parallel_for_rows(ex, gr.n_out * gr.blocks, reduce_block, adj);
          return;
        }
        auto gp = tensor<T>::empty(gr.ps, gy.dev());
        adj.gx = gp.raw_data();
        parallel_for_rows(ex, gr.n_out * gr.blocks, reduce_block, adj);
        g.add(0, gp.permuted(gr.inv));
      },
      v);
}
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE var<T> prod_var<T>(var<T> const &, std::vector<int> const &, bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
} // namespace detail

// The product over `axes` (all when empty) of a tape variable or lazy expression.
template <var_like X>
auto prod(X const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  DUALCAST_REFUSE_FLOAT16("prod", X);
  static_assert(detail::plain_operand<X>(),
                "dualcast::prod: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  return detail::prod_var(detail::as_var(x), axes, keepdims);
}

} // namespace dualcast
