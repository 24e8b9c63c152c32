// dualcast/ops/conv2d.hpp: 2-D convolution (cross-correlation, as in deep learning) of NCHW
// images, on tape variables and on tensors.
//
//   auto y = dualcast::conv2d(x, w, b, {.stride = 2, .padding = 1});  // x [N,C,H,W], w [O,C,KH,KW]
//   auto y = dualcast::conv2d(x, w);                                   // no bias, stride 1, no pad
//
// y[n,o,i,j] = b[o] + sum over c, p, q of x[n, c, i*s + p - pad, j*s + q - pad] * w[o,c,p,q], with
// zeros outside the image (zero padding), output extents OH = (H + 2 pad - KH) / s + 1 (and OW
// alike, rounded down; a kernel larger than the padded image is a shape_error).
//
// The convolution is a linear stencil whose weights are data, and its adjoints follow the
// stencil rules (ops/stencil.hpp): each thread owns every element it writes, no atomics.
//   input   xbar[n,c,h,v] = sum over o, p, q of ybar[n,o,i,j] w[o,c,p,q] where h = i*s + p - pad,
//           v = j*s + q - pad: the GATHER with the mirrored stencil, one thread per row of xbar
//           (stride 2 reads every other output row and column: only the (i, p) with
//           h + pad - p divisible by s contribute, so no work is spent on zeros);
//   weights wbar[o,c,p,q] = sum over n, i, j of ybar[n,o,i,j] x[n,c,i*s+p-pad, j*s+q-pad]: a dot
//           product per weight, one thread per (o, c, p);
//   bias    bbar[o] = the sum of ybar over n, i, j, one thread per o.
// Every sum runs in a fixed order, so results are the same bits at any number of threads.
//
// These direct loops need no buffer and win with few channels (one channel and a 7 x 7 kernel:
// 28x faster than im2col + gemm). With many channels the CPU takes im2col + gemm instead
// (ops/conv2d_gemm.hpp; conv2d_options::algorithm chooses, automatic by shape); CUDA tensors always
// take these kernels. bench/primitives.cpp measures both (the figures: docs/performance.md, "CPU:
// parallel primitives").
//
// On a tape over duals (host only) each part of the result and of the adjoints is a sum of plain
// convolutions of parts (bilinear; conv2d_run on duals below).
//
// On tensors: conv2d(x, w[, b], options) gives the value and conv2d_vjp(x, w, ybar, options) the
// three gradients (input, weights, bias), on the tensors' device.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/ops/conv2d_gemm.hpp>
#include <dualcast/ops/conv2d_geometry.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <string>
#include <type_traits>

namespace dualcast {

namespace detail {

// Each kernel below is a row operation (detail::parallel_for_rows): on the CPU a row runs on one
// thread with the loops ordered for the vectoriser (a weight times a shifted input row); on CUDA a
// warp shares the row, each lane owning the elements j = lane, lane + 32, ... it writes and adding
// their terms in the same (c, p, q) order as the CPU, so no two threads write one element.
template <class L> inline constexpr bool serial_row = std::remove_cvref_t<L>::count() == 1;

// Forward, one output row (n, o, i) per index: the row starts at the bias and adds one weight
// times a shifted input row per (c, p, q), so the inner loop runs over contiguous j.
template <class T> struct conv2d_forward {
  T const *x, *w, *b; // b may be null
  T *y;
  conv2d_geometry g;
  // f(xr, wr) for each (c, p) in order whose input row h = i*s + p - pad lies in the image: xr
  // that input row, wr the weights (o, c, p, 0..KW).
  template <class F>
  DUALCAST_HD void for_each_tap_row(index_t n, index_t o, index_t i, F const &f) const {
    for (index_t c = 0; c < g.C; ++c)
      for (index_t p = 0; p < g.KH; ++p) {
        index_t const h = i * g.s + p - g.pad;
        if (h >= 0 && h < g.H)
          f(x + ((n * g.C + c) * g.H + h) * g.W, w + ((o * g.C + c) * g.KH + p) * g.KW);
      }
  }
  template <class L> DUALCAST_HD void operator()(index_t r, L const &lanes) const {
    index_t const i = r % g.OH, o = (r / g.OH) % g.O, n = r / (g.OH * g.O);
    T *yr = y + r * g.OW;
    T const b0 = b ? b[o] : T(0);
    if constexpr (!serial_row<L>) {
      for (index_t j = lanes.lane(); j < g.OW; j += lanes.count()) {
        T acc = b0;
        for_each_tap_row(n, o, i, [&](T const *xr, T const *wr) {
          for (index_t q = 0; q < g.KW; ++q) {
            index_t const v = j * g.s + q - g.pad;
            if (v >= 0 && v < g.W)
              acc += wr[q] * xr[v];
          }
        });
        yr[j] = acc;
      }
    } else {
      for (index_t j = 0; j < g.OW; ++j)
        yr[j] = b0;
      for_each_tap_row(n, o, i, [&](T const *xr, T const *wr) {
        for (index_t q = 0; q < g.KW; ++q) {
          index_t lo, hi;
          conv2d_geometry::valid(q - g.pad, g.s, g.W, g.OW, lo, hi);
          T const wv = wr[q];
          T const *xq = xr + q - g.pad;
          if (g.s == 1)
            for (index_t j = lo; j < hi; ++j)
              yr[j] += wv * xq[j];
          else
            for (index_t j = lo; j < hi; ++j)
              yr[j] += wv * xq[j * g.s];
        }
      });
    }
  }
};

// Input adjoint, one row (n, c, h) of xbar per index: the mirrored stencil, reading the rows of
// ybar that row h fed (i = (h + pad - p) / s where divisible).
template <class T> struct conv2d_input_gather {
  T const *gy, *w;
  T *gx;
  conv2d_geometry g;
  // Whether coordinate t >= 0 (input + pad - kernel offset) is a multiple of the stride, and the
  // output coordinate it then is. In 32 bits (coordinates within one image): a 64-bit division is
  // a call on CUDA, whose saved registers ptxas reported as spills in the float gather.
  DUALCAST_HD bool fed(index_t t) const { return int(t) % int(g.s) == 0; }
  DUALCAST_HD index_t fed_at(index_t t) const { return int(t) / int(g.s); }
  // f(yr, wr) for each (o, p) in order where input row h fed output row i = (h + pad - p) / s
  // (divisible, in range): yr that row of ybar, wr the weights (o, c, p, 0..KW).
  template <class F>
  DUALCAST_HD void for_each_fed_row(index_t n, index_t c, index_t h, F const &f) const {
    for (index_t o = 0; o < g.O; ++o)
      for (index_t p = 0; p < g.KH; ++p) {
        index_t const t = h + g.pad - p;
        if (t >= 0 && fed(t) && fed_at(t) < g.OH)
          f(gy + ((n * g.O + o) * g.OH + fed_at(t)) * g.OW, w + ((o * g.C + c) * g.KH + p) * g.KW);
      }
  }
  template <class L> DUALCAST_HD void operator()(index_t r, L const &lanes) const {
    index_t const h = r % g.H, c = (r / g.H) % g.C, n = r / (g.H * g.C);
    T *xr = gx + r * g.W;
    if constexpr (!serial_row<L>) {
      // xbar[v] gathers ybar[j] w[q] over j*s + q - pad = v, in the serial loops' (o, p, q) order
      for (index_t v = lanes.lane(); v < g.W; v += lanes.count()) {
        T acc = T(0);
        for_each_fed_row(n, c, h, [&](T const *yr, T const *wr) {
          for (index_t q = 0; q < g.KW; ++q) {
            index_t const u = v + g.pad - q;
            if (u >= 0 && fed(u) && fed_at(u) < g.OW)
              acc += wr[q] * yr[fed_at(u)];
          }
        });
        xr[v] = acc;
      }
    } else {
      for (index_t v = 0; v < g.W; ++v)
        xr[v] = T(0);
      for_each_fed_row(n, c, h, [&](T const *yr, T const *wr) {
        for (index_t q = 0; q < g.KW; ++q) {
          index_t lo, hi;
          conv2d_geometry::valid(q - g.pad, g.s, g.W, g.OW, lo, hi);
          T const wv = wr[q];
          T *xq = xr + q - g.pad; // xbar[j*s + q - pad] += w * ybar[j]
          if (g.s == 1)
            for (index_t j = lo; j < hi; ++j)
              xq[j] += wv * yr[j];
          else
            for (index_t j = lo; j < hi; ++j)
              xq[j * g.s] += wv * yr[j];
        }
      });
    }
  }
};

// Weight adjoint, the KW weights (o, c, p, 0..KW) per index: dot products of ybar's rows with the
// shifted input rows, over n and i in order. With stride 1 each dot product runs in 8 lanes
// (summed at the end), which the compiler vectorises; a single accumulator would be a chain of
// dependent adds. On CUDA the warp's lanes split j and their sums meet in a fixed shuffle tree.
// The order depends on the shapes and the backend only, never on the threads.
template <class T> struct conv2d_weight_adjoint {
  static constexpr int lanes = 8;
  T const *gy, *x;
  T *gw;
  conv2d_geometry g;
  template <class L> DUALCAST_HD void operator()(index_t r, L const &warp) const {
    index_t const p = r % g.KH, c = (r / g.KH) % g.C, o = r / (g.KH * g.C);
    for (index_t q = 0; q < g.KW; ++q) {
      index_t lo, hi;
      conv2d_geometry::valid(q - g.pad, g.s, g.W, g.OW, lo, hi);
      T acc[lanes] = {};
      for (index_t n = 0; n < g.N; ++n)
        for (index_t i = 0; i < g.OH; ++i) {
          index_t const h = i * g.s + p - g.pad;
          if (h < 0 || h >= g.H)
            continue;
          T const *yr = gy + ((n * g.O + o) * g.OH + i) * g.OW;
          T const *xq = x + ((n * g.C + c) * g.H + h) * g.W + q - g.pad;
          index_t j = lo;
          if constexpr (serial_row<L>) {
            if (g.s == 1)
              for (; j + lanes <= hi; j += lanes)
                for (int l = 0; l < lanes; ++l)
                  acc[l] += yr[j + l] * xq[j + l];
          } else {
            j += warp.lane();
          }
          for (; j < hi; j += warp.count())
            acc[0] += yr[j] * xq[j * g.s];
        }
      T sum = T(0);
      for (int l = 0; l < lanes; ++l)
        sum += acc[l];
      sum = warp.reduce(sum, [](T a, T b) { return a + b; });
      if (warp.lane() == 0)
        gw[r * g.KW + q] = sum;
    }
  }
};

// Bias adjoint, one output channel per index.
template <class T> struct conv2d_bias_adjoint {
  T const *gy;
  T *gb;
  conv2d_geometry g;
  template <class L> DUALCAST_HD void operator()(index_t o, L const &lanes) const {
    T acc = T(0);
    index_t const plane = g.OH * g.OW;
    for (index_t n = 0; n < g.N; ++n) {
      T const *yp = gy + (n * g.O + o) * plane;
      for (index_t k = lanes.lane(); k < plane; k += lanes.count())
        acc += yp[k];
    }
    acc = lanes.reduce(acc, [](T a, T b) { return a + b; });
    if (lanes.lane() == 0)
      gb[o] = acc;
  }
};

// The value from contiguous operands (b undefined: no bias).
template <class Ex, class T>
tensor<T> conv2d_run(Ex const &ex, tensor<T> const &x, tensor<T> const &w, tensor<T> const &b,
                     conv2d_geometry const &g) {
  if constexpr (std::is_same_v<Ex, cpu>)
    if (conv2d_uses_gemm<T>(g))
      return conv2d_gemm_run(ex, x, w, b, g);
  auto y = tensor<T>::empty({g.N, g.O, g.OH, g.OW}, x.dev());
  if (y.size() > 0)
    parallel_for_rows(
        ex, g.N * g.O * g.OH, g.OW * g.C * g.KH * g.KW,
        conv2d_forward<T>{x.data(), w.data(), b.defined() ? b.data() : nullptr, y.raw_data(), g});
  return y;
}

// The gradients from contiguous x, w and ybar; each only where asked for.
template <class Ex, class T>
conv2d_grads<T> conv2d_adjoints(Ex const &ex, tensor<T> const &x, tensor<T> const &w,
                                tensor<T> const &gy, conv2d_geometry const &g, bool want_x,
                                bool want_w, bool want_b) {
  conv2d_grads<T> r;
  device const dev = x.dev();
  if constexpr (std::is_same_v<Ex, cpu>)
    if ((want_x || want_w) && conv2d_uses_gemm<T>(g)) {
      conv2d_gemm_adjoints(ex, x, w, gy, g, want_x ? &r.input : nullptr,
                           want_w ? &r.weights : nullptr);
      want_x = want_w = false; // (the bias below as always)
    }
  if (want_x) {
    r.input = tensor<T>::zeros(x.dims(), dev);
    if (x.size() > 0 && gy.size() > 0)
      parallel_for_rows(ex, g.N * g.C * g.H, g.W * g.O * g.KH * g.KW / (g.s * g.s) + 1,
                        conv2d_input_gather<T>{gy.data(), w.data(), r.input.raw_data(), g});
  }
  if (want_w) {
    r.weights = tensor<T>::zeros(w.dims(), dev);
    if (w.size() > 0 && gy.size() > 0)
      parallel_for_rows(ex, g.O * g.C * g.KH, g.KW * g.N * g.OH * g.OW,
                        conv2d_weight_adjoint<T>{gy.data(), x.data(), r.weights.raw_data(), g});
  }
  if (want_b) {
    r.bias = tensor<T>::zeros({g.O}, dev);
    if (gy.size() > 0)
      parallel_for_rows(ex, g.O, g.N * g.OH * g.OW,
                        conv2d_bias_adjoint<T>{gy.data(), r.bias.raw_data(), g});
  }
  return r;
}

// On a tape over duals (host only): a convolution is bilinear in x and w, so each part is made of
// plain convolutions of parts -- y_0 = x_0 * w_0 + b_0 (the plain tape's bits), y_k = x_k * w_0 +
// x_0 * w_k + b_k -- and likewise the adjoints: xbar_k = adj_x(ybar_k, w_0) + adj_x(ybar_0, w_k),
// wbar_k = adj_w(x_0, ybar_k) + adj_w(x_k, ybar_0), bbar_k = adj_b(ybar_k): 2K + 1 plain passes.
template <class R> tensor<R> plus_parts(tensor<R> a, tensor<R> const &b) { // (a fresh, contiguous)
  tensor<R> bc = b.contiguous();
  R *p = a.raw_data();
  for (index_t e = 0; e < a.size(); ++e)
    p[e] += bc.data()[e];
  return a;
}
template <class Ex, class R, int K>
tensor<dual<R, K>> conv2d_run(Ex const &ex, tensor<dual<R, K>> const &x,
                              tensor<dual<R, K>> const &w, tensor<dual<R, K>> const &b,
                              conv2d_geometry const &g) {
  auto const xs = dual_split(x), ws = dual_split(w);
  std::array<tensor<R>, K + 1> ys;
  tensor<R> const none;
  for (int k = 0; k <= K; ++k) {
    tensor<R> const bk = b.defined() ? dual_component(b, k - 1) : none;
    ys[std::size_t(k)] = conv2d_run(ex, xs[std::size_t(k)], ws[0], bk, g);
    if (k > 0)
      ys[std::size_t(k)] =
          plus_parts(ys[std::size_t(k)], conv2d_run(ex, xs[0], ws[std::size_t(k)], none, g));
  }
  return dual_join<dual<R, K>>(ys[0].dims(), ys);
}
template <class Ex, class R, int K>
conv2d_grads<dual<R, K>> conv2d_adjoints(Ex const &ex, tensor<dual<R, K>> const &x,
                                         tensor<dual<R, K>> const &w, tensor<dual<R, K>> const &gy,
                                         conv2d_geometry const &g, bool want_x, bool want_w,
                                         bool want_b) {
  auto const xs = dual_split(x), ws = dual_split(w), gs = dual_split(gy);
  std::array<tensor<R>, K + 1> gi, gw, gb;
  for (int k = 0; k <= K; ++k) {
    std::size_t const c = std::size_t(k);
    auto p = conv2d_adjoints(ex, xs[0], ws[0], gs[c], g, want_x, want_w, want_b);
    gi[c] = p.input, gw[c] = p.weights, gb[c] = p.bias;
    if (k > 0 && (want_x || want_w)) {
      auto q = conv2d_adjoints(ex, xs[c], ws[c], gs[0], g, want_x, want_w, false);
      if (want_x)
        gi[c] = plus_parts(gi[c], q.input);
      if (want_w)
        gw[c] = plus_parts(gw[c], q.weights);
    }
  }
  conv2d_grads<dual<R, K>> r;
  if (want_x)
    r.input = dual_join<dual<R, K>>(x.dims(), gi);
  if (want_w)
    r.weights = dual_join<dual<R, K>>(w.dims(), gw);
  if (want_b)
    r.bias = dual_join<dual<R, K>>(gb[0].dims(), gb);
  return r;
}

template <class T, class... In> auto conv2d_on_tape(conv2d_geometry const &g, In const &...in) {
  constexpr bool has_bias = sizeof...(In) == 3;
  return custom_op(
      "conv2d",
      [&](auto const &ex, auto &ctx, tensor<T> const &xv, tensor<T> const &wv, auto const &...bv) {
        tensor<T> xc = xv.contiguous(), wc = wv.contiguous();
        ctx.save(xc, "input");
        ctx.save(wc, "weights");
        tensor<T> bc;
        ((bc = bv.contiguous()), ...);
        return conv2d_run(ex, xc, wc, bc, g);
      },
      [g](auto const &ex, auto const &ctx, auto &gr) {
        bool const want_b = has_bias && gr.needs(has_bias ? 2 : 0);
        auto d = conv2d_adjoints(ex, ctx.saved(0), ctx.saved(1), gr.out(0).contiguous(), g,
                                 gr.needs(0), gr.needs(1), want_b);
        if (d.input.defined())
          gr.add(0, d.input);
        if (d.weights.defined())
          gr.add(1, d.weights);
        if (d.bias.defined())
          gr.add(has_bias ? 2 : 0, d.bias);
      },
      in...);
}

} // namespace detail

// ---- on tape variables and lazy expressions ----------------------------------------------------
template <var_like X, var_like Wt>
auto conv2d(X const &x, Wt const &w, conv2d_options options = {}) {
  DUALCAST_REFUSE_FLOAT16("conv2d", X, Wt);
  using T = typename detail::var_of_t<X>::value_type;
  auto const &xv = detail::as_var(x);
  auto const &wv = detail::as_var(w);
  auto const g = detail::make_conv2d_geometry(xv.dims(), wv.dims(), options);
  return detail::conv2d_on_tape<T>(g, xv, wv);
}
template <var_like X, var_like Wt, var_like B>
auto conv2d(X const &x, Wt const &w, B const &b, conv2d_options options = {}) {
  DUALCAST_REFUSE_FLOAT16("conv2d", X, Wt, B);
  using T = typename detail::var_of_t<X>::value_type;
  auto const &xv = detail::as_var(x);
  auto const &wv = detail::as_var(w);
  auto const &bv = detail::as_var(b);
  auto const g = detail::make_conv2d_geometry(xv.dims(), wv.dims(), options);
  detail::check_conv2d_bias(bv.dims(), g);
  return detail::conv2d_on_tape<T>(g, xv, wv, bv);
}

// ---- on tensors: the value, and the gradients for a given ybar ---------------------------------
template <class T>
tensor<T> conv2d(tensor<T> const &x, tensor<T> const &w, tensor<T> const &b,
                 conv2d_options options = {}) {
  auto const g = detail::make_conv2d_geometry(x.dims(), w.dims(), options);
  if (b.defined()) {
    detail::check_conv2d_bias(b.dims(), g);
    detail::common_device("dualcast::conv2d", x.dev(), b.dev());
  }
  detail::common_device("dualcast::conv2d", x.dev(), w.dev());
  return detail::on_device("dualcast::conv2d", x.dev(), detail::ambient_cpu(), [&](auto const &ex) {
    return detail::conv2d_run(ex, x.contiguous(), w.contiguous(), b.defined() ? b.contiguous() : b,
                              g);
  });
}
template <class T>
tensor<T> conv2d(tensor<T> const &x, tensor<T> const &w, conv2d_options options = {}) {
  return conv2d(x, w, tensor<T>{}, options);
}

// d<ybar, conv2d(x, w, b)> / d(x, w, b) (the bias gradient does not depend on b).
template <class T>
conv2d_grads<T> conv2d_vjp(tensor<T> const &x, tensor<T> const &w, tensor<T> const &ybar,
                           conv2d_options options = {}) {
  auto const g = detail::make_conv2d_geometry(x.dims(), w.dims(), options);
  if (!(ybar.dims() == shape{g.N, g.O, g.OH, g.OW}))
    throw shape_error("dualcast::conv2d_vjp: ybar has shape " + to_string(ybar.dims()) +
                      ", the output's is " + to_string(shape{g.N, g.O, g.OH, g.OW}));
  detail::common_device("dualcast::conv2d_vjp", x.dev(), w.dev());
  detail::common_device("dualcast::conv2d_vjp", x.dev(), ybar.dev());
  return detail::on_device("dualcast::conv2d_vjp", x.dev(), detail::ambient_cpu(),
                           [&](auto const &ex) {
                             return detail::conv2d_adjoints(ex, x.contiguous(), w.contiguous(),
                                                            ybar.contiguous(), g, true, true, true);
                           });
}

} // namespace dualcast
