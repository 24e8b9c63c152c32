// dualcast/ops/argmax.hpp: argmax and argmin of tape variables, lazy expressions or tensors: the
// positions as an integer tensor on x's device, or as an index_array on the host (no gradient).
//
//   dualcast::argmax(x);              // over all elements: the row-major flat index, shape ()
//   dualcast::argmax(x, -1);          // along the last axis: x's shape without it
//   dualcast::argmin(x, 1, true);     // keepdims: fits dualcast::gather(x, 1, ...)
//   dualcast::argmax<std::int64_t>(x, 1, true);  // a tensor<std::int64_t> on x's device
//   dualcast::argmax<std::int32_t>(x);           // (int32: the flat index must fit)
//
// One pass on x's device, one item per output position scanning its row in order.
// Ties go to the lowest index; NaN counts as the extremum (the first NaN wins), like NumPy and
// PyTorch. An empty axis throws dualcast::shape_error. On duals: the positions of the values.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/ops/indexing.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <limits>
#include <string>
#include <vector>

namespace dualcast {

namespace detail {
// out[g] = the position of the extremum in row g (n contiguous values from x + g * n).
template <bool Max, class T, class I> struct arg_extremum_rows {
  T const *x;
  I *out;
  index_t n;
  DUALCAST_HD void operator()(index_t g) const {
    T const *row = x + g * n;
    index_t best = 0;
    for (index_t j = 1; j < n && row[best] == row[best]; ++j) // (stops at a NaN)
      if (row[j] != row[j] || (Max ? row[j] > row[best] : row[j] < row[best]))
        best = j;
    out[g] = I(best);
  }
};

// axis < 0 with all = true: over all elements (flat index). On x's device.
template <bool Max, class I, class T>
tensor<I> arg_extremum(char const *op, tensor<T> const &xin, int axis, bool all, bool keepdims) {
  static_assert(is_index_element_v<I>, "dualcast::argmax / argmin: the positions are "
                                       "std::int32_t or std::int64_t");
  if constexpr (is_dual_v<T>) { // (host only: the values' positions)
    return arg_extremum<Max, I>(op, value_part(xin), axis, all, keepdims);
  } else if constexpr (is_float16_v<T>) { // compared in float (exact)
    return arg_extremum<Max, I>(op, converted<float>(xin, ambient_cpu()), axis, all, keepdims);
  } else {
    shape const s = xin.dims();
    std::vector<bool> mask =
        all ? std::vector<bool>(std::size_t(s.rank), true) : axis_mask(op, {axis}, s.rank);
    auto perm = kept_then_reduced(mask);
    index_t n = 1;
    for (int i = 0; i < s.rank; ++i)
      if (mask[std::size_t(i)])
        n *= s.ext[i];
    shape const rs = reduced_shape(s, mask, keepdims);
    index_t const groups = rs.size();
    if (n == 0 && groups > 0)
      throw shape_error(std::string(op) + ": cannot reduce over an empty axis of shape " +
                        to_string(s));
    if (n - 1 > index_t(std::numeric_limits<I>::max()))
      throw shape_error(std::string(op) + ": " + std::to_string(n) +
                        " positions do not fit the index type (use std::int64_t)");
    tensor<T> xp = xin.permuted(perm).contiguous();
    auto r = tensor<I>::empty(rs, xin.dev());
    on_device(op, xin.dev(), ambient_cpu(), [&](auto const &ex) {
      dualcast::for_each(ex, groups, arg_extremum_rows<Max, T, I>{xp.data(), r.raw_data(), n}, n);
    });
    return r;
  }
}
template <class I> index_array to_index_array(tensor<I> const &t) {
  return index_array{t.dims(), t.to_vector()};
}
template <bool Max, class I, class X>
tensor<I> arg_extremum_of(char const *op, X const &x, int axis, bool all, bool keepdims) {
  if constexpr (is_tensor_v<X>) {
    return arg_extremum<Max, I>(op, x, axis, all, keepdims);
  } else {
    auto const &v = as_var(x);
    auto const on_stream = tape_stream_scope(v.owner(), v.value().dev()); // (CUDA: its stream)
    return arg_extremum<Max, I>(op, v.value(), axis, all, keepdims);
  }
}
} // namespace detail

// The positions as a `tensor<I>` (I: `std::int32_t` or `std::int64_t`) on x's device.
template <class I, class X>
requires(var_like<X> || is_tensor_v<X>) tensor<I> argmax(X const &x) {
  return detail::arg_extremum_of<true, I>("dualcast::argmax", x, 0, true, false);
}
template <class I, class X>
requires(var_like<X> || is_tensor_v<X>) tensor<I> argmax(X const &x, int axis,
                                                         bool keepdims = false) {
  return detail::arg_extremum_of<true, I>("dualcast::argmax", x, axis, false, keepdims);
}
template <class I, class X>
requires(var_like<X> || is_tensor_v<X>) tensor<I> argmin(X const &x) {
  return detail::arg_extremum_of<false, I>("dualcast::argmin", x, 0, true, false);
}
template <class I, class X>
requires(var_like<X> || is_tensor_v<X>) tensor<I> argmin(X const &x, int axis,
                                                         bool keepdims = false) {
  return detail::arg_extremum_of<false, I>("dualcast::argmin", x, axis, false, keepdims);
}

// The convenience: the positions as an index_array on the host.
template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array argmax(X const &x) {
  return detail::to_index_array(argmax<index_t>(x));
}
template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array
    argmax(X const &x, int axis, bool keepdims = false) {
  return detail::to_index_array(argmax<index_t>(x, axis, keepdims));
}
template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array argmin(X const &x) {
  return detail::to_index_array(argmin<index_t>(x));
}
template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array
    argmin(X const &x, int axis, bool keepdims = false) {
  return detail::to_index_array(argmin<index_t>(x, axis, keepdims));
}

} // namespace dualcast
