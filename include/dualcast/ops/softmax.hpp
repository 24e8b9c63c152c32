// dualcast/ops/softmax.hpp: numerically stable softmax, log_softmax and logsumexp along one axis
// or several (together: the elements of all of them form one group).
//
//   softmax(x, axis)      y = exp(x - m) / sum exp(x - m)            (m = max along the axis)
//   log_softmax(x, axis)  y = x - logsumexp(x)
//   logsumexp(x, axis, keepdims)  m + log(sum exp(x - m))
//   softmax(x, {1, 2}), log_softmax(x, {0, -1}), logsumexp(x, {1, 2}, keepdims): over the axes
//   together (an empty list: all axes)
// Backward: softmax gx = y * (gy - sum(gy * y)); log_softmax gx = gy - softmax(x) * sum(gy);
// logsumexp gx = gy * exp(x - y). One row (the group's elements, contiguous after moving the
// axes last) is one call of a row operation shared by the CPU backend (rows in parallel with
// OpenMP, each sequential) and the CUDA backend (one warp per row). On a tape over duals
// (dual<T, K> elements, docs/higher-order.md) the same rows run in dual arithmetic, forward and
// backward: forward over reverse (values and gradients equal to the plain rows' to rounding: the
// compiler may contract their multiply-adds differently).
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/math/functions.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace dualcast {

namespace detail {

// x with the axes of `mask` moved last, as a contiguous (rows, n) array, plus the permutation
// used.
template <class T> struct rows_view {
  tensor<T> data; // contiguous, the permuted shape
  std::vector<int> perm;
  index_t rows = 0, n = 0;
};
template <class T> rows_view<T> axes_last(tensor<T> const &x, std::vector<bool> const &mask) {
  rows_view<T> r;
  r.perm = kept_then_reduced(mask);
  r.data = x.permuted(r.perm).contiguous();
  r.n = 1;
  for (int i = 0; i < x.rank(); ++i)
    if (mask[std::size_t(i)])
      r.n *= x.extent(i);
  r.rows = r.n > 0 ? x.size() / r.n : 0; // (an empty group: no row to run)
  return r;
}
// A contiguous result in the permuted layout, seen in x's layout (a view).
template <class T> tensor<T> from_rows(tensor<T> const &t, std::vector<int> const &perm) {
  return t.permuted(inverse_perm(perm));
}

// Infinity of T's real numbers (T itself, or a dual's: a tape over duals runs these rows on
// dual<T, K> elements, forward over reverse).
template <class T> constexpr scalar_of_t<T> inf_of() {
  return std::numeric_limits<scalar_of_t<T>>::infinity();
}

// Lane reductions of the row operations below (commutative: every lane gets the same bits).
template <class T> struct row_sum {
  DUALCAST_HD T operator()(T a, T b) const { return a + b; }
};
// The online softmax's state: a maximum m and the sum of exp(x - m) over what it has seen.
template <class T> struct max_and_sum { T m, s; };
template <class T> struct combine_max_and_sum { // commutative: the same bits on every lane
  DUALCAST_HD max_and_sum<T> operator()(max_and_sum<T> a, max_and_sum<T> b) const {
    T const m = b.m > a.m ? b.m : a.m;
    return {m, a.s * (a.m == m ? T(1) : dualcast::exp(a.m - m)) +
                   b.s * (b.m == m ? T(1) : dualcast::exp(b.m - m))};
  }
};

// Row r of x (n contiguous values), over the lanes of a row operation: on the CPU one lane, the
// loops sequential; on CUDA the 32 threads of a warp take every 32nd element and combine their
// partial maxima and sums (the sums then differ from the CPU's in rounding: a few ulp). mode 0:
// softmax, 1: log_softmax, 2: logsumexp (out has one value per row). S: the storage of x and out
// (T, or bfloat16 / half computed in float T: each value widened on load, each result rounded
// once); lse, where given, receives each row's logsumexp in T (what the 16-bit backward needs).
template <class T, class S = T> struct softmax_row {
  S const *x;
  S *out;
  index_t n;
  int mode;
  T *lse_out = nullptr;
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    S const *xr = x + r * n;
    int const l = lanes.lane(), nl = lanes.count();
    T m = T(xr[0]); // every lane starts from the first element: a NaN there wins, as sequentially
    T s = 0;
    if constexpr (Lanes::count() == 1) {
      // Two passes (the maximum, then the sum): the row is in cache for the second, and each
      // loop is branch-free.
      for (index_t j = 1; j < n; ++j)
        m = T(xr[j]) > m ? T(xr[j]) : m;
      for (index_t j = 0; j < n; ++j)
        s += dualcast::exp(T(xr[j]) - m);
    } else {
      // One pass, online (Milakov and Gimelshein, 2018): each lane keeps its running maximum and
      // its sum relative to it, rescaling the sum when the maximum grows; the lanes' pairs then
      // meet in the warp's shuffle tree. The row is read twice in all (here and for the output),
      // not three times. A term equal to the running maximum counts exp(0) = 1 (also for
      // infinities, whose difference is NaN), and an infinite maximum makes the sum NaN at the
      // end: what the two passes give (exp(inf - inf) there), NaNs propagating alike.
      for (index_t j = l; j < n; j += nl) {
        T const v = T(xr[j]);
        if (v > m) {
          s = s * dualcast::exp(m - v) + T(1);
          m = v;
        } else {
          s += v == m ? T(1) : dualcast::exp(v - m);
        }
      }
      auto const ms = lanes.reduce(max_and_sum<T>{m, s}, combine_max_and_sum<T>{});
      m = ms.m;
      s = m == inf_of<T>() || m == -inf_of<T>()
              ? T(std::numeric_limits<scalar_of_t<T>>::quiet_NaN())
              : ms.s;
    }
    T lse = m + dualcast::log(s);
    if (lse_out && l == 0)
      lse_out[r] = lse;
    if (mode == 2) {
      if (l == 0)
        out[r] = S(lse);
    } else {
      S *o = out + r * n;
      for (index_t j = l; j < n; j += nl)
        o[j] = S(mode == 0 ? dualcast::exp(T(xr[j]) - lse) : T(xr[j]) - lse);
    }
  }
};
// The adjoint of row r: G the output gradient (one value per row for logsumexp), Y the result,
// X the input (logsumexp only), O the input gradient.
template <class T> struct softmax_row_backward {
  T const *Y, *G, *X;
  T *O;
  index_t n;
  int mode;
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    int const l = lanes.lane(), nl = lanes.count();
    if (mode == 0) {
      T dot = 0;
      for (index_t j = l; j < n; j += nl)
        dot += G[r * n + j] * Y[r * n + j];
      dot = lanes.reduce(dot, row_sum<T>{});
      for (index_t j = l; j < n; j += nl)
        O[r * n + j] = Y[r * n + j] * (G[r * n + j] - dot);
    } else if (mode == 1) {
      T s = 0;
      for (index_t j = l; j < n; j += nl)
        s += G[r * n + j];
      s = lanes.reduce(s, row_sum<T>{});
      for (index_t j = l; j < n; j += nl)
        O[r * n + j] = G[r * n + j] - dualcast::exp(Y[r * n + j]) * s;
    } else {
      for (index_t j = l; j < n; j += nl)
        O[r * n + j] = G[r] * dualcast::exp(X[r * n + j] - Y[r]);
    }
  }
};

// One function per element type (not per operand expression), which the compiled component holds
// (dualcast/core/compiled.hpp).
template <class T>
var<T> softmax_like(char const *op, var<T> const &v, std::vector<int> const &axes, int mode,
                    bool keepdims) {
  auto const mask = axis_mask(op, axes, v.rank());
  // Over an empty axis softmax and log_softmax are empty and logsumexp is -inf (the log of an
  // empty sum), as in NumPy and PyTorch.
  shape const lse_shape = reduced_shape(v.dims(), mask, false); // logsumexp without keepdims
  struct state {
    tensor<T> yp; // the result in the permuted contiguous layout
    std::vector<int> perm;
    index_t rows = 0, n = 0;
  };
  return custom_op<state>(
      mode == 0   ? "softmax"
      : mode == 1 ? "log_softmax"
                  : "logsumexp",
      [&](auto const &ex, auto &ctx, tensor<T> const &xv) {
        auto rv = axes_last(xv, mask);
        shape ys = rv.data.dims();
        if (mode == 2) // the reduced axes (last) of extent 1
          for (int i = ys.rank - 1; i >= 0 && mask[std::size_t(rv.perm[std::size_t(i)])]; --i)
            ys.ext[i] = 1;
        tensor<T> yp = tensor<T>::empty(ys, xv.dev());
        if (mode == 2 && rv.n == 0)
          yp.assign_raw(tensor<T>::full(shape{}, T(-inf_of<T>()), xv.dev()));
        parallel_for_rows(ex, rv.rows, 4 * rv.n,
                          softmax_row<T>{rv.data.data(), yp.raw_data(), rv.n, mode});
        ctx.data = {yp, rv.perm, rv.rows, rv.n};
        ctx.save(yp, "result");
        if (mode == 2) {
          ctx.save(rv.data, "input");
          return keepdims ? from_rows(yp, rv.perm) : yp.reshape(lse_shape);
        }
        return from_rows(yp, rv.perm);
      },
      [mode](auto const &ex, auto const &ctx, auto &g) {
        if (!g.needs(0) || ctx.data.n == 0) // (no input element: nothing to write)
          return;
        auto const &st = ctx.data;
        // gy in the permuted contiguous layout
        shape gs = st.yp.dims();
        tensor<T> gy = g.out(0);
        tensor<T> gc = mode == 2 ? gy.contiguous().reshape(gs) : gy.permuted(st.perm).contiguous();
        tensor<T> xp = mode == 2 ? ctx.saved(1) : tensor<T>{};
        tensor<T> gx = tensor<T>::empty(mode == 2 ? xp.dims() : gs, gy.dev());
        parallel_for_rows(
            ex, st.rows, 4 * st.n,
            softmax_row_backward<T>{st.yp.data(), gc.data(), xp.data(), gx.raw_data(), st.n, mode});
        g.add(0, from_rows(gx, st.perm));
      },
      v);
}
// The adjoint of row r over bfloat16 / half (S), in float: each probability recomputed from the
// 16-bit input X and the row's logsumexp L (float), p = exp(x - L), not read back from a rounded
// result; G the output's 16-bit gradient (one value per row for logsumexp), O the input's
// gradient, each element rounded once.
template <class S> struct softmax_row_backward16 {
  S const *X, *G;
  float const *L;
  S *O;
  index_t n;
  int mode;
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    int const l = lanes.lane(), nl = lanes.count();
    S const *x = X + r * n, *g = mode == 2 ? G : G + r * n; // (logsumexp: one per row)
    S *o = O + r * n;
    float const lse = L[r];
    if (mode == 2) {
      float const gr = float(G[r]);
      for (index_t j = l; j < n; j += nl)
        o[j] = S(gr * dualcast::exp(float(x[j]) - lse));
      return;
    }
    float acc = 0; // softmax: sum g p; log_softmax: sum g
    for (index_t j = l; j < n; j += nl)
      acc += mode == 0 ? float(g[j]) * dualcast::exp(float(x[j]) - lse) : float(g[j]);
    acc = lanes.reduce(acc, row_sum<float>{});
    for (index_t j = l; j < n; j += nl) {
      float const p = dualcast::exp(float(x[j]) - lse);
      o[j] = S(mode == 0 ? p * (float(g[j]) - acc) : float(g[j]) - p * acc);
    }
  }
};

// softmax (mode 0), log_softmax (1) or logsumexp (2) of a bfloat16 / half variable: one node
// whose rows read the 16 bits and compute in float (each result rounded once); no cast nodes,
// no float copy of the input. It keeps the 16-bit input (the variable's own storage when the
// axes are already last and it is contiguous; else its 16-bit copy in that order) and one float
// per row (the logsumexp), from which backward recomputes every probability in float.
template <class S>
var<S> softmax_like16(char const *op, var<S> const &v, std::vector<int> const &axes, int mode,
                      bool keepdims) {
  tape *tp = tape_of(op, v);
  cpu const host = tp ? tp->ex : ambient_cpu();
  device const dev = v.value().dev();
  auto const on_stream = tape_stream_scope(tp, dev);
  auto const mask = axis_mask(op, axes, v.rank());
  shape const lse_shape = reduced_shape(v.dims(), mask, false);
  auto rv = axes_last(v.value(), mask);
  shape ys = rv.data.dims();
  if (mode == 2)
    for (int i = ys.rank - 1; i >= 0 && mask[std::size_t(rv.perm[std::size_t(i)])]; --i)
      ys.ext[i] = 1;
  tensor<S> yp = tensor<S>::empty(ys, dev);
  if (mode == 2 && rv.n == 0)
    yp.assign_raw(tensor<S>::full(shape{}, S(-inf_of<float>()), dev));
  bool const needs = tp && v.requires_grad() && tp->grad_enabled();
  tensor<float> lse = tensor<float>::empty(shape{needs ? rv.rows : 0}, dev);
  on_device(op, dev, host, [&](auto const &ex) {
    parallel_for_rows(ex, rv.rows, 4 * rv.n,
                      softmax_row<float, S>{rv.data.data(), yp.raw_data(), rv.n, mode,
                                            needs ? lse.raw_data() : nullptr});
  });
  tensor<S> y = mode != 2  ? from_rows(yp, rv.perm)
                : keepdims ? from_rows(yp, rv.perm)
                           : yp.reshape(lse_shape);
  if (!needs)
    return var<S>(std::move(y), nullptr, tp);
  var<S> res = tp->make_output(std::move(y), true);
  arena_array<saved_tensor> saves(tp->node_memory(), 2);
  saves[0] = save(rv.data, "input (rows)");
  saves[1] = save(lse, "logsumexp of each row (float)");
  tp->record_static<S, 1>(
      mode == 0   ? "softmax (16-bit)"
      : mode == 1 ? "log_softmax (16-bit)"
                  : "logsumexp (16-bit)",
      {res.slot()},
      [in = v.slot(), xp = rv.data, lse, perm = rv.perm, rows = rv.rows, n = rv.n, mode, op,
       host](std::array<std::shared_ptr<grad_slot<S>>, 1> const &os) {
        if (n == 0) // (no input element: nothing to write)
          return;
        tensor<S> const gy = out_grad(*os[0]);
        tensor<S> const gc = mode == 2 ? gy.contiguous() : gy.permuted(perm).contiguous();
        tensor<S> gx = tensor<S>::empty(xp.dims(), xp.dev());
        on_device(op, xp.dev(), host, [&](auto const &ex) {
          parallel_for_rows(
              ex, rows, 4 * n,
              softmax_row_backward16<S>{xp.data(), gc.data(), lse.data(), gx.raw_data(), n, mode});
        });
        accumulate_grad(*in, from_rows(gx, perm), host);
      },
      std::move(saves));
  return res;
}

#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE var<T> softmax_like<T>(char const *, var<T> const &,                        \
                                              std::vector<int> const &, int, bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
} // namespace detail

template <var_like X> auto softmax(X const &x, int axis = -1) {
  return detail::softmax_like("dualcast::softmax", detail::as_var(x), {axis}, 0, false);
}
template <var_like X> auto log_softmax(X const &x, int axis = -1) {
  return detail::softmax_like("dualcast::log_softmax", detail::as_var(x), {axis}, 1, false);
}
template <var_like X> auto logsumexp(X const &x, int axis = -1, bool keepdims = false) {
  return detail::softmax_like("dualcast::logsumexp", detail::as_var(x), {axis}, 2, keepdims);
}
// Over several axes together (an empty list: all axes).
template <var_like X> auto softmax(X const &x, std::vector<int> const &axes) {
  return detail::softmax_like("dualcast::softmax", detail::as_var(x), axes, 0, false);
}
template <var_like X> auto log_softmax(X const &x, std::vector<int> const &axes) {
  return detail::softmax_like("dualcast::log_softmax", detail::as_var(x), axes, 1, false);
}
template <var_like X>
auto logsumexp(X const &x, std::vector<int> const &axes, bool keepdims = false) {
  return detail::softmax_like("dualcast::logsumexp", detail::as_var(x), axes, 2, keepdims);
}

// Over bfloat16 / half: one node reading the 16 bits, computing in float, each result rounded
// once (detail::softmax_like16).
template <var_like X>
requires(detail::float16_operand<X>()) auto softmax(X const &x, int axis = -1) {
  return detail::softmax_like16("dualcast::softmax", detail::as_var(x), {axis}, 0, false);
}
template <var_like X>
requires(detail::float16_operand<X>()) auto log_softmax(X const &x, int axis = -1) {
  return detail::softmax_like16("dualcast::log_softmax", detail::as_var(x), {axis}, 1, false);
}
template <var_like X>
requires(detail::float16_operand<X>()) auto logsumexp(X const &x, int axis = -1,
                                                      bool keepdims = false) {
  return detail::softmax_like16("dualcast::logsumexp", detail::as_var(x), {axis}, 2, keepdims);
}
template <var_like X>
requires(detail::float16_operand<X>()) auto softmax(X const &x, std::vector<int> const &axes) {
  return detail::softmax_like16("dualcast::softmax", detail::as_var(x), axes, 0, false);
}
template <var_like X>
requires(detail::float16_operand<X>()) auto log_softmax(X const &x, std::vector<int> const &axes) {
  return detail::softmax_like16("dualcast::log_softmax", detail::as_var(x), axes, 1, false);
}
template <var_like X>
requires(detail::float16_operand<X>()) auto logsumexp(X const &x, std::vector<int> const &axes,
                                                      bool keepdims = false) {
  return detail::softmax_like16("dualcast::logsumexp", detail::as_var(x), axes, 2, keepdims);
}

} // namespace dualcast
