// dualcast/ops/argmax.hpp: argmax and argmin of tape variables, lazy expressions or tensors: the
// positions as an index_array (no gradient; computed on the host from the values).
//
//   dualcast::argmax(x);              // over all elements: the row-major flat index, shape ()
//   dualcast::argmax(x, -1);          // along the last axis: x's shape without it
//   dualcast::argmin(x, 1, true);     // keepdims: fits dualcast::gather(x, 1, ...)
//
// Ties go to the lowest index; NaN counts as the extremum (the first NaN wins), like NumPy and
// PyTorch. An empty axis throws dualcast::shape_error. On duals: the positions of the values.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/ops/indexing.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <string>
#include <vector>

namespace dualcast {

namespace detail {
template <class X> auto host_values(X const &x) {
  if constexpr (is_tensor_v<X>) {
    return x.to(device::host()).contiguous();
  } else {
    auto const &v = as_var(x);
    auto const on_stream = tape_stream_scope(v.owner(), v.value().dev()); // (CUDA: its stream)
    return v.value().to(device::host()).contiguous();
  }
}

// axis < 0 with all = true: over all elements (flat index).
template <bool Max, class T>
index_array arg_extremum(char const *op, tensor<T> const &x, int axis, bool all, bool keepdims) {
  shape const s = x.dims();
  std::vector<bool> mask =
      all ? std::vector<bool>(std::size_t(s.rank), true) : axis_mask(op, {axis}, s.rank);
  auto perm = kept_then_reduced(mask);
  tensor<T> xp = x.permuted(perm).contiguous();
  index_t n = 1;
  for (int i = 0; i < s.rank; ++i)
    if (mask[std::size_t(i)])
      n *= s.ext[i];
  index_array r;
  r.dims = reduced_shape(s, mask, keepdims);
  index_t groups = r.dims.size();
  if (n == 0 && groups > 0)
    throw shape_error(std::string(op) + ": cannot reduce over an empty axis of shape " +
                      to_string(s));
  T const *p = xp.data();
  r.values.resize(std::size_t(groups));
  for (index_t g = 0; g < groups; ++g) {
    T const *row = p + g * n;
    index_t best = 0;
    for (index_t j = 1; j < n && row[best] == row[best]; ++j) // (stops at a NaN)
      if (row[j] != row[j] || (Max ? row[j] > row[best] : row[j] < row[best]))
        best = j;
    r.values[std::size_t(g)] = best;
  }
  return r;
}
} // namespace detail

template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array argmax(X const &x) {
  return detail::arg_extremum<true>("dualcast::argmax", detail::value_part(detail::host_values(x)),
                                    0, true, false);
}
template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array
    argmax(X const &x, int axis, bool keepdims = false) {
  return detail::arg_extremum<true>("dualcast::argmax", detail::value_part(detail::host_values(x)),
                                    axis, false, keepdims);
}
template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array argmin(X const &x) {
  return detail::arg_extremum<false>("dualcast::argmin", detail::value_part(detail::host_values(x)),
                                     0, true, false);
}
template <class X>
requires(var_like<X> || is_tensor_v<X>) index_array
    argmin(X const &x, int axis, bool keepdims = false) {
  return detail::arg_extremum<false>("dualcast::argmin", detail::value_part(detail::host_values(x)),
                                     axis, false, keepdims);
}

} // namespace dualcast
