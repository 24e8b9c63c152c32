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

#include <dualcast/backend/cpu.hpp>
#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <string>
#include <vector>

namespace dualcast {

namespace detail {
// sum of x over the masked axes, result of keepdims shape.
template <class T>
tensor<T> sum_keepdims(cpu const &host, tensor<T> const &x, std::vector<bool> const &mask) {
  tensor<T> xc = x.contiguous();
  tensor<T> r = tensor<T>::empty(reduced_shape(x.dims(), mask, true), x.dev());
  if (x.size() == 0) {
    r.assign_raw(tensor<T>::zeros(shape{}, x.dev()));
    return r;
  }
  on_device("dualcast::sum", x.dev(), host, [&](auto const &ex) {
    backend_reduce(hook{}, ex, xc.dims(), static_cast<T const *>(xc.data()), r.raw_view(), false);
  });
  return r;
}

// y[i], arg[i] = the first extremal element of group i (n contiguous elements) and its position.
template <class T, bool Max> struct extremum_groups {
  T const *src;
  T *y;
  index_t *arg;
  index_t n;
  DUALCAST_HD void operator()(index_t i) const {
    T const *g = src + i * n;
    index_t best = 0;
    for (index_t j = 1; j < n; ++j)
      if (Max ? g[j] > g[best] : g[j] < g[best])
        best = j;
    arg[i] = best;
    y[i] = g[best];
  }
};
// The adjoint: group i of gx (zero elsewhere) receives gy[i] at its extremal position.
template <class T> struct extremum_scatter {
  T const *gy;
  index_t const *arg;
  T *gx;
  index_t n;
  DUALCAST_HD void operator()(index_t i) const { gx[i * n + arg[i]] = gy[i]; }
};
} // namespace detail

template <class T>
var<T> sum(var<T> const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  tape *tp = x.owner();
  auto mask = detail::axis_mask("dualcast::sum", axes, x.rank());
  tensor<T> kd = detail::sum_keepdims(tp ? tp->ex : cpu{}, x.value(), mask);
  shape kds = kd.dims();
  tensor<T> y = keepdims ? kd : kd.reshape(detail::reduced_shape(x.dims(), mask, false));
  auto sx = x.slot();
  return detail::record_op<T>("sum", tp, y, bool(sx), [sx, kds](tensor<T> gy) {
    tape::accumulate_grad(sx, gy.reshape(kds).broadcast_to(sx->dims));
  });
}

template <class T>
var<T> mean(var<T> const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  auto mask = detail::axis_mask("dualcast::mean", axes, x.rank());
  index_t n = 1;
  for (int i = 0; i < x.rank(); ++i)
    if (mask[std::size_t(i)])
      n *= x.dims().ext[i];
  return sum(x, axes, keepdims) * (T(1) / T(n > 0 ? n : 1));
}

namespace detail {
template <class T, bool Max>
var<T> extremum(char const *op, var<T> const &x, std::vector<int> const &axes, bool keepdims) {
  tape *tp = x.owner();
  auto mask = axis_mask(op, axes, x.rank());
  auto perm = kept_then_reduced(mask);
  tensor<T> xp = x.value().permuted(perm).contiguous();
  shape kd = reduced_shape(x.dims(), mask, true);
  index_t n_out = kd.size(), n_red = n_out > 0 ? x.size() / n_out : 0;
  if (n_red == 0)
    throw shape_error(std::string(op) + ": cannot reduce over an empty axis of shape " +
                      to_string(x.dims()));
  device dev = x.value().dev();
  tensor<T> y = tensor<T>::empty(kd, dev);
  // The positions, in a block of the device's memory (shared with the backward closure).
  auto arg = storage::allocate(std::size_t(n_out) * sizeof(index_t), dev, default_resource(dev));
  cpu host = tp ? tp->ex : cpu{};
  on_device(op, dev, host, [&](auto const &ex) {
    parallel_for(
        ex, n_out, n_red,
        extremum_groups<T, Max>{xp.data(), y.data(), static_cast<index_t *>(arg->data()), n_red});
  });
  if (!keepdims)
    y = y.reshape(reduced_shape(x.dims(), mask, false));
  auto sx = x.slot();
  shape ps = xp.dims();
  std::string name = Max ? "max" : "min";
  return record_op<T>(
      name, tp, y, bool(sx), [sx, arg, perm, ps, n_out, n_red, host, name](tensor<T> gy) {
        tensor<T> g = gy.contiguous();
        tensor<T> gp = tensor<T>::zeros(ps, sx->dev);
        on_device("dualcast::" + name, sx->dev, host, [&](auto const &ex) {
          parallel_for(ex, n_out, 1,
                       extremum_scatter<T>{g.data(), static_cast<index_t const *>(arg->data()),
                                           gp.data(), n_red});
        });
        tensor<T> target = tape::grad_zeroed(*sx).permuted(perm);
        add_into(target, gp);
      });
}
} // namespace detail

template <class T>
var<T> max(var<T> const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  return detail::extremum<T, true>("dualcast::max", x, axes, keepdims);
}
template <class T>
var<T> min(var<T> const &x, std::vector<int> const &axes = {}, bool keepdims = false) {
  return detail::extremum<T, false>("dualcast::min", x, axes, keepdims);
}

} // namespace dualcast
