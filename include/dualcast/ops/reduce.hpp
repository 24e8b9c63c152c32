// dualcast/ops/reduce.hpp: sum, mean, max and min over axes of tape variables.
//
//   dualcast::sum(x);                     // all axes -> shape ()
//   dualcast::sum(x, {0}, true);          // axis 0, keepdims
//   dualcast::mean(x, {-1});  dualcast::max(x, {1});  dualcast::min(x);
//
// Axes may be negative; an empty list means all axes. Backward of sum / mean broadcasts the
// output gradient back; max / min send it to the first extremal element of each reduced group.
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
tensor<T> sum_keepdims(cpu const &ex, tensor<T> const &x, std::vector<bool> const &mask) {
  tensor<T> xc = x.contiguous();
  tensor<T> r = tensor<T>::empty(reduced_shape(x.dims(), mask, true));
  if (x.size() == 0) {
    r.assign_raw(tensor<T>::zeros(shape{}));
    return r;
  }
  cpu_backend::reduce_broadcast(ex, xc.dims(), static_cast<T const *>(xc.data()), r.raw_view(),
                                false);
  return r;
}
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
  tensor<T> y = tensor<T>::empty(kd);
  auto arg = std::make_shared<std::vector<index_t>>(std::size_t(n_out));
  T const *src = xp.data();
  for (index_t i = 0; i < n_out; ++i) {
    index_t best = 0;
    for (index_t j = 1; j < n_red; ++j) {
      T v = src[i * n_red + j], b = src[i * n_red + best];
      if (Max ? v > b : v < b)
        best = j;
    }
    (*arg)[std::size_t(i)] = best;
    y.data()[i] = src[i * n_red + best];
  }
  if (!keepdims)
    y = y.reshape(reduced_shape(x.dims(), mask, false));
  auto sx = x.slot();
  shape ps = xp.dims();
  return record_op<T>(Max ? "max" : "min", tp, y, bool(sx),
                      [sx, arg, perm, ps, n_out, n_red](tensor<T> gy) {
                        tensor<T> g = gy.contiguous();
                        tensor<T> gp = tensor<T>::zeros(ps);
                        for (index_t i = 0; i < n_out; ++i)
                          gp.data()[i * n_red + (*arg)[std::size_t(i)]] = g.data()[i];
                        tensor<T> target = tape::grad_zeroed(*sx).permuted(perm);
                        add_into(target.raw_view(), gp.cview());
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
