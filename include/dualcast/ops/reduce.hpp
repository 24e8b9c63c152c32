// dualcast/ops/reduce.hpp: sum, mean, max and min over axes of tape variables.
//
//   dualcast::sum(x);                     // all axes -> shape ()
//   dualcast::sum(x, {0}, true);          // axis 0, keepdims
//   dualcast::mean(x, {-1});  dualcast::max(x, {1});  dualcast::min(x);
//
// Axes may be negative; an empty list means all axes. Backward of sum / mean broadcasts the
// output gradient back; max / min send it to the first extremal element of each reduced group.
// All of it runs on the operand's device: sums through the backends' broadcast reduction, max /
// min groups through one function object per group (shared by the CPU and CUDA backends).
#pragma once

#include <dualcast/arrays/detail/chunks.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace dualcast {

namespace detail {
// sum of x over the masked axes, result of keepdims shape.
template <class Ex, class T>
tensor<T> sum_keepdims(Ex const &ex, tensor<T> const &x, std::vector<bool> const &mask) {
  tensor<T> xc = x.contiguous();
  tensor<T> r = tensor<T>::empty(reduced_shape(x.dims(), mask, true), x.dev());
  if (x.size() == 0) {
    r.assign_raw(tensor<T>::zeros(shape{}, x.dev()));
    return r;
  }
  backend_reduce(hook{}, ex, xc.dims(), static_cast<T const *>(xc.data()), r.raw_view(), false);
  return r;
}
// The same on a tape over duals: the plain sum of each part (a sum is linear), so the value has
// the plain tape's bits.
template <class Ex, class R, int K>
tensor<dual<R, K>> sum_keepdims(Ex const &ex, tensor<dual<R, K>> const &x,
                                std::vector<bool> const &mask) {
  return dual_componentwise(x, [&](tensor<R> const &c) { return sum_keepdims(ex, c, mask); });
}

// y[i], arg[i] = the first extremal element of group i (n contiguous elements) and its position.
// A long group is cut into `chunks` chunks of chunk_len positions (the last shorter), rows of
// their own: row i * chunks + c writes its chunk's winner to cand (then extremum_pick below
// chooses among a group's chunks). One warp or one thread on a whole group of 10^7 took 110 ms
// on an H200 and 19 ms on two CPU cores.
template <class T, bool Max> struct extremum_groups {
  T const *src;
  T *y;
  index_t *arg;
  index_t n;
  index_t chunks = 1, chunk_len = n;
  index_t *cand = nullptr;
  // Of two positions of a group: the extremal value, the lower position on a tie; NaN never
  // wins against a number (commutative, as a lane reduction must be).
  struct better {
    T const *g;
    DUALCAST_HD index_t operator()(index_t a, index_t b) const {
      bool const beyond = Max ? g[b] > g[a] : g[b] < g[a];
      return beyond || (g[b] == g[a] && b < a) ? b : a;
    }
  };
  // The CPU's one lane: the winner among position 0 and positions [from, to) as K = 64 / sizeof(T)
  // lanes would find it (lane l: position 0, then from + l, from + l + K, ...; their winners
  // combined by `better`), which is the sequential scan's winner (below). The lanes are one
  // vector: a compare and two blends per K elements (10^7 floats, 2 threads: 6.8 -> 1.1 ms).
  static index_t vector_winner(T const *g, index_t from, index_t to) {
    using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
    constexpr int K = 64 / int(sizeof(T));
    typedef T vt __attribute__((vector_size(64)));
    typedef I vi __attribute__((vector_size(64)));
    vt bv;
    vi bm; // the step of each lane's winner, -1: position 0
    for (int l = 0; l < K; ++l)
      bv[l] = g[0], bm[l] = -1;
    index_t j = from;
    I m = 0;
    for (; j + K <= to; j += K, ++m) {
      vt v;
      std::memcpy(&v, g + j, sizeof v);
      vi const t = Max ? vi(v > bv) : vi(v < bv);
      bv = vt((vi(bv) & ~t) | (vi(v) & t));
      bm = (bm & ~t) | ((vi{} + m) & t);
    }
    index_t bi[K];
    for (int l = 0; l < K; ++l)
      bi[l] = bm[l] < 0 ? 0 : from + index_t(bm[l]) * K + l;
    for (int l = 0; j + l < to; ++l) // the last, partial step
      if (Max ? g[j + l] > g[bi[l]] : g[j + l] < g[bi[l]])
        bi[l] = j + l;
    better const pick{g};
    index_t best = bi[0];
    for (int l = 1; l < K; ++l)
      best = pick(best, bi[l]);
    return best;
  }
  // Group i over the lanes of a row operation: each lane scans position 0 and then every
  // count()-th position after it (one lane: the sequential scan, ties to the first; a NaN at
  // position 0 wins, a later one never does); the lanes' winners are combined by `better`.
  // A chunk starts from position 0 of its group too, so every winner has been compared with
  // it: all winners are numbers, or all are position 0 (a NaN there), and `better` picks among
  // them as the sequential scan would.
  template <class Lanes> DUALCAST_HD void operator()(index_t r, Lanes const &lanes) const {
    index_t const i = r / chunks, j0 = r % chunks * chunk_len;
    index_t const j1 = n - j0 < chunk_len ? n : j0 + chunk_len;
    T const *g = src + i * n;
    index_t best = 0;
#if !defined(__CUDA_ARCH__)
    if constexpr (Lanes::count() == 1) {
      best = vector_winner(g, j0 > 0 ? j0 : 1, j1);
    } else
#endif
    {
      for (index_t j = (j0 > 0 ? j0 : 1) + lanes.lane(); j < j1; j += lanes.count())
        if (Max ? g[j] > g[best] : g[j] < g[best])
          best = j;
    }
    best = lanes.reduce(best, better{g});
    if (lanes.lane() == 0) {
      if (chunks > 1) {
        cand[r] = best;
      } else {
        arg[i] = best;
        y[i] = g[best];
      }
    }
  }
};
// Group i of a cut reduction: the best of its chunks' winners (ties: the lower position).
template <class T, bool Max> struct extremum_pick {
  T const *src;
  T *y;
  index_t *arg;
  index_t n, chunks;
  index_t const *cand;
  template <class Lanes> DUALCAST_HD void operator()(index_t i, Lanes const &lanes) const {
    T const *g = src + i * n;
    typename extremum_groups<T, Max>::better const pick{g};
    index_t best = cand[i * chunks];
    for (index_t c = 1 + lanes.lane(); c < chunks; c += lanes.count())
      best = pick(best, cand[i * chunks + c]);
    best = lanes.reduce(best, pick);
    if (lanes.lane() == 0) {
      arg[i] = best;
      y[i] = g[best];
    }
  }
};
// The adjoint: group i of gx (zero elsewhere) receives gy[i] at its extremal position (Add: is
// added to the gradient there).
template <class T, bool Add = false> struct extremum_scatter {
  T const *gy;
  index_t const *arg;
  T *gx;
  index_t n;
  DUALCAST_HD void operator()(index_t i) const {
    T &e = gx[i * n + arg[i]];
    e = Add ? e + gy[i] : gy[i];
  }
};
// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE tensor<T> sum_keepdims<cpu, T>(cpu const &, tensor<T> const &,              \
                                                      std::vector<bool> const &);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace detail

namespace detail {
// sum on a variable: one function per element type (not per operand expression), which
// the compiled component holds (dualcast/core/compiled.hpp).
template <class T> var<T> sum_var(var<T> const &v, std::vector<int> const &axes, bool keepdims) {
  auto mask = detail::axis_mask("dualcast::sum", axes, v.rank());
  shape const kds = detail::reduced_shape(v.dims(), mask, true);
  shape const xs = v.dims();
  return custom_op(
      "sum",
      [&](auto const &ex, auto &, tensor<T> const &xv) {
        tensor<T> kd = detail::sum_keepdims(ex, xv, mask);
        return keepdims ? kd : kd.reshape(detail::reduced_shape(xs, mask, false));
      },
      [kds, xs](auto const &, auto const &, auto &g) {
        g.add(0, g.out(0).reshape(kds).broadcast_to(xs));
      },
      v);
}
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE var<T> sum_var<T>(var<T> const &, std::vector<int> const &, bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
} // namespace detail

template <var_like X>
auto sum(X const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  return detail::sum_var(detail::as_var(x), axes, keepdims);
}
template <var_like X>
auto mean(X const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  using T = typename detail::var_of_t<X>::value_type;
  auto const &v = detail::as_var(x);
  auto mask = detail::axis_mask("dualcast::mean", axes, v.rank());
  index_t n = 1;
  for (int i = 0; i < v.rank(); ++i)
    if (mask[std::size_t(i)])
      n *= v.dims().ext[i];
  // over no element: 0 * inf = NaN, like NumPy
  using R = scalar_of_t<T>; // (a real factor also on a tape over duals)
  return detail::sum_var(v, axes, keepdims) * (R(1) / R(n));
}

namespace detail {
// What max / min keep for backward: the position of each group's extremum.
struct extremum_state {
  std::shared_ptr<storage> arg;
};

template <bool Max, class T>
var<T> extremum(char const *op, var<T> const &v, std::vector<int> const &axes, bool keepdims) {
  auto mask = axis_mask(op, axes, v.rank());
  auto perm = kept_then_reduced(mask);
  shape kd = reduced_shape(v.dims(), mask, true);
  index_t n_out = kd.size(), n_red = 1;
  for (int i = 0; i < v.rank(); ++i)
    if (mask[std::size_t(i)])
      n_red *= v.dims().ext[i];
  if (n_red == 0 && n_out > 0) // (an empty result of a non-empty reduction is fine)
    throw shape_error(std::string(op) + ": cannot reduce over an empty axis of shape " +
                      to_string(v.dims()) + ": the extremum of no element is undefined");
  shape const out_shape = keepdims ? kd : reduced_shape(v.dims(), mask, false);
  shape const ps = permuted_shape(v.dims(), perm);
  return custom_op<extremum_state>(
      Max ? "max" : "min",
      [&](auto const &ex, auto &ctx, tensor<T> const &xv) {
        tensor<T> xp = xv.permuted(perm).contiguous();
        device dev = xv.dev();
        tensor<T> y = tensor<T>::empty(kd, dev);
        // The positions, in a block of the device's memory (kept for backward).
        ctx.data.arg =
            storage::allocate(std::size_t(n_out) * sizeof(index_t), dev, default_resource(dev));
        auto *arg = static_cast<index_t *>(ctx.data.arg->data());
        extremum_groups<T, Max> groups{xp.data(), y.raw_data(), arg, n_red};
        // Few long groups are cut into chunks (arrays/detail/chunks.hpp; the winner does not depend
        // on it).
        chunking const c = cut_runs(n_out, n_red);
        groups.chunks = c.chunks, groups.chunk_len = c.len;
        if (groups.chunks == 1) {
          parallel_for_rows(ex, n_out, n_red, groups);
        } else {
          auto cand = storage::allocate(std::size_t(n_out * groups.chunks) * sizeof(index_t), dev,
                                        default_resource(dev));
          groups.cand = static_cast<index_t *>(cand->data());
          parallel_for_rows(ex, n_out * groups.chunks, groups.chunk_len, groups);
          parallel_for_rows(ex, n_out, groups.chunks,
                            extremum_pick<T, Max>{xp.data(), y.raw_data(), arg, n_red,
                                                  groups.chunks, groups.cand});
        }
        return y.reshape(out_shape);
      },
      [perm, ps, n_out, n_red](auto const &ex, auto const &ctx, auto &g) {
        if (!g.needs(0))
          return;
        tensor<T> gy = g.out(0).contiguous();
        if (is_identity_perm(perm)) { // straight into the gradient: no zero array, no add pass
          tensor<T> gx = g.zeroed(0);
          if (gx.is_contiguous()) {
            parallel_for(ex, n_out, 1,
                         extremum_scatter<T, true>{
                             gy.data(), static_cast<index_t const *>(ctx.data.arg->data()),
                             gx.raw_data(), n_red});
            return;
          }
        }
        tensor<T> gp = tensor<T>::zeros(ps, gy.dev());
        parallel_for(ex, n_out, 1,
                     extremum_scatter<T>{gy.data(),
                                         static_cast<index_t const *>(ctx.data.arg->data()),
                                         gp.raw_data(), n_red});
        add_into(g.zeroed(0).permuted(perm), gp);
      },
      v);
}
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE var<T> extremum<true, T>(char const *, var<T> const &,                      \
                                                std::vector<int> const &, bool);                   \
  DUALCAST_INSTANTIATE var<T> extremum<false, T>(char const *, var<T> const &,                     \
                                                 std::vector<int> const &, bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

// max / min on a tape over duals (host only): the plain groups on the value part pick each
// group's position (the plain tape's values and ties); the result is the element there, partials
// and all, and backward puts each dual cotangent there (a selection: linear once the positions
// are fixed). One thread per group (no chunks: the winner does not depend on them).
template <bool Max, class D>
var<D> extremum_dual(char const *op, var<D> const &v, std::vector<int> const &axes, bool keepdims) {
  using R = real_part_t<D>;
  auto mask = axis_mask(op, axes, v.rank());
  auto perm = kept_then_reduced(mask);
  shape kd = reduced_shape(v.dims(), mask, true);
  index_t n_out = kd.size(), n_red = 1;
  for (int i = 0; i < v.rank(); ++i)
    if (mask[std::size_t(i)])
      n_red *= v.dims().ext[i];
  if (n_red == 0 && n_out > 0)
    throw shape_error(std::string(op) + ": cannot reduce over an empty axis of shape " +
                      to_string(v.dims()) + ": the extremum of no element is undefined");
  shape const out_shape = keepdims ? kd : reduced_shape(v.dims(), mask, false);
  shape const ps = permuted_shape(v.dims(), perm);
  return custom_op<extremum_state>(
      Max ? "max" : "min",
      [&](auto const &ex, auto &ctx, tensor<D> const &xv) {
        tensor<D> xp = xv.permuted(perm).contiguous();
        tensor<R> xval = dual_component(xp, -1);
        device dev = xv.dev();
        tensor<R> yval = tensor<R>::empty(kd, dev);
        ctx.data.arg =
            storage::allocate(std::size_t(n_out) * sizeof(index_t), dev, default_resource(dev));
        auto *arg = static_cast<index_t *>(ctx.data.arg->data());
        parallel_for_rows(ex, n_out, n_red,
                          extremum_groups<R, Max>{xval.data(), yval.raw_data(), arg, n_red});
        tensor<D> y = tensor<D>::empty(kd, dev);
        for (index_t i = 0; i < n_out; ++i)
          y.raw_data()[i] = xp.data()[i * n_red + arg[i]];
        return y.reshape(out_shape);
      },
      [perm, ps, n_out, n_red](auto const &, auto const &ctx, auto &g) {
        if (!g.needs(0))
          return;
        tensor<D> gy = g.out(0).contiguous();
        tensor<D> gp = tensor<D>::zeros(ps, gy.dev());
        auto const *arg = static_cast<index_t const *>(ctx.data.arg->data());
        for (index_t i = 0; i < n_out; ++i)
          gp.raw_data()[i * n_red + arg[i]] = gy.data()[i];
        g.add(0, gp.permuted(inverse_perm(perm)));
      },
      v);
}
} // namespace detail

template <var_like X>
auto max(X const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  DUALCAST_REFUSE_FLOAT16("max", X);
  if constexpr (is_dual_v<typename detail::var_of_t<X>::value_type>)
    return detail::extremum_dual<true>("dualcast::max", detail::as_var(x), axes, keepdims);
  else
    return detail::extremum<true>("dualcast::max", detail::as_var(x), axes, keepdims);
}
template <var_like X>
auto min(X const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  DUALCAST_REFUSE_FLOAT16("min", X);
  if constexpr (is_dual_v<typename detail::var_of_t<X>::value_type>)
    return detail::extremum_dual<false>("dualcast::min", detail::as_var(x), axes, keepdims);
  else
    return detail::extremum<false>("dualcast::min", detail::as_var(x), axes, keepdims);
}

namespace detail {
// y + x * a (the adjoint of mean added into a 16-bit gradient: one rounding).
struct add_scaled_fn {
  template <class Y, class X, class A>
  DUALCAST_HD auto operator()(Y const &y, X const &x, A const &a) const {
    return y + x * a;
  }
};
inline constexpr kernel<add_scaled_fn> add_scaled_kernel{add_scaled_fn{}};

// sum (scale 1) or mean (scale 1 / n) of a bfloat16 / half variable: one node that reads the 16
// bits (the backends' reduction, summing in float), scales in float and rounds each result once;
// no cast nodes and no float copy of the input, and it keeps nothing for backward. Backward
// reads the output's 16-bit gradient broadcast over the input (a view) and writes the input's
// gradient in its own precision: y + scale * g in float, rounded once.
template <class T16>
var<T16> sum_var16(char const *op, var<T16> const &v, std::vector<int> const &axes, bool keepdims,
                   bool mean) {
  tape *tp = tape_of(op, v);
  cpu const host = tp ? tp->ex : ambient_cpu();
  device const dev = v.value().dev();
  auto const on_stream = tape_stream_scope(tp, dev);
  auto const mask = axis_mask(op, axes, v.rank());
  shape const kds = reduced_shape(v.dims(), mask, true), xs = v.dims();
  index_t n = 1;
  for (int i = 0; i < v.rank(); ++i)
    if (mask[std::size_t(i)])
      n *= xs.ext[i];
  float const scale = mean ? 1.0f / float(n) : 1.0f; // (over no element: NaN, like NumPy)
  tensor<T16> const xc = v.value().contiguous();
  tensor<T16> y = tensor<T16>::empty(kds, dev);
  if (xc.size() == 0) {
    y.assign_raw(tensor<T16>::full(shape{}, T16(0.0f * scale), dev));
  } else {
    tensor<float> const r = tensor<float>::empty(kds, dev); // (output-sized)
    on_device(op, dev, host, [&](auto const &ex) {
      backend_reduce(hook{}, ex, xc.dims(), static_cast<T16 const *>(xc.data()), r.raw_view(),
                     false);
      apply(ex, scale_kernel, out(y.raw_view()), r.cview(), scale);
    });
  }
  if (!keepdims)
    y = y.reshape(reduced_shape(xs, mask, false));
  if (!tp || !v.requires_grad() || !tp->grad_enabled())
    return var<T16>(std::move(y), nullptr, tp);
  var<T16> res = tp->make_output(std::move(y), true);
  tp->record_static<T16, 1>(
      mean ? "mean (16-bit)" : "sum (16-bit)", {res.slot()},
      [in = v.slot(), kds, xs, scale, op,
       host](std::array<std::shared_ptr<grad_slot<T16>>, 1> const &os) {
        tensor<T16> const gb = out_grad(*os[0]).reshape(kds).broadcast_to(xs);
        if (scale == 1.0f) { // (sum: the 16-bit gradient as it is)
          accumulate_grad(*in, gb, host);
          return;
        }
        auto const target = grad_target(*in); // (no structured binding: clang 14 cannot capture)
        tensor<T16> const &t = target.first;
        on_device(op, in->dev, host, [&](auto const &ex) {
          if (target.second)
            apply(ex, add_scaled_kernel, out(t.raw_view()), t.cview(), gb.cview(), scale);
          else
            apply(ex, scale_kernel, out(t.raw_view()), gb.cview(), scale);
        });
      },
      arena_array<saved_tensor>{});
  return res;
}
} // namespace detail

// Over bfloat16 / half: one node reading the 16 bits, accumulating in float, each result rounded
// once (detail::sum_var16).
template <var_like X>
requires(detail::float16_operand<X>()) auto sum(X const &x, std::vector<int> const &axes = {},
                                                bool keepdims = false) {
  return detail::sum_var16("dualcast::sum", detail::as_var(x), axes, keepdims, false);
}
template <var_like X>
requires(detail::float16_operand<X>()) auto mean(X const &x, std::vector<int> const &axes = {},
                                                 bool keepdims = false) {
  return detail::sum_var16("dualcast::mean", detail::as_var(x), axes, keepdims, true);
}

} // namespace dualcast
