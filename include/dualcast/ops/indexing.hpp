// dualcast/ops/indexing.hpp: index_select and gather on tape variables, with their adjoints
// (scatter-add of the output gradient).
//
//   index_select(x, axis, {2, 0, 2})    // numpy take(x, idx, axis)
//   gather(x, axis, index)              // numpy take_along_axis; index: integer array of x's
//                                       // rank, same extents as x except along `axis`
// An index outside [0, extent) throws dualcast::index_error naming the index and the bound.
#pragma once

#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <string>
#include <vector>

namespace dualcast {

// An integer array (indices), row-major.
struct index_array {
  shape dims;
  std::vector<index_t> values;
};

namespace detail {
inline void check_index(char const *op, index_t v, index_t pos, index_t bound, int axis) {
  if (v < 0 || v >= bound)
    throw index_error(std::string(op) + ": index " + std::to_string(v) + " at position " +
                      std::to_string(pos) + " is out of range [0, " + std::to_string(bound) +
                      ") for axis " + std::to_string(axis));
}
// Calls f(flat, multi-index) for every element of s in row-major order.
template <class F> void for_each_index(shape const &s, F &&f) {
  index_t idx[max_rank] = {};
  index_t n = s.size();
  for (index_t flat = 0; flat < n; ++flat) {
    f(flat, idx);
    for (int d = s.rank - 1; d >= 0; --d) {
      if (++idx[d] < s.ext[d])
        break;
      idx[d] = 0;
    }
  }
}
template <class T> index_t offset_of(tensor<T> const &t, index_t const *idx) {
  index_t o = 0;
  for (int d = 0; d < t.rank(); ++d)
    o += idx[d] * t.stride(d);
  return o;
}
} // namespace detail

template <class T>
var<T> index_select(var<T> const &x, int axis, std::vector<index_t> const &indices) {
  char const *op = "dualcast::index_select";
  int ax = detail::normalize_axis(op, axis, x.rank());
  index_t bound = x.dims().ext[ax];
  for (std::size_t i = 0; i < indices.size(); ++i)
    detail::check_index(op, indices[i], index_t(i), bound, ax);
  shape s = x.dims();
  s.ext[ax] = index_t(indices.size());
  tensor<T> y = tensor<T>::empty(s);
  for (std::size_t i = 0; i < indices.size(); ++i)
    y.slice(ax, index_t(i), index_t(i) + 1)
        .assign_raw(x.value().slice(ax, indices[i], indices[i] + 1));
  auto sx = x.slot();
  return detail::record_op<T>(
      "index_select", x.owner(), y, bool(sx), [sx, ax, indices](tensor<T> gy) {
        tensor<T> g = tape::grad_zeroed(*sx);
        for (std::size_t i = 0; i < indices.size(); ++i)
          detail::add_into(g.slice(ax, indices[i], indices[i] + 1).raw_view(),
                           gy.slice(ax, index_t(i), index_t(i) + 1).cview());
      });
}

template <class T> var<T> gather(var<T> const &x, int axis, index_array const &index) {
  char const *op = "dualcast::gather";
  int ax = detail::normalize_axis(op, axis, x.rank());
  if (index.dims.rank != x.rank() || index_t(index.values.size()) != index.dims.size())
    throw shape_error(std::string(op) + ": index of shape " + to_string(index.dims) + " (" +
                      std::to_string(index.values.size()) +
                      " values) does not fit input of shape " + to_string(x.dims()));
  for (int d = 0; d < x.rank(); ++d)
    if (d != ax && index.dims.ext[d] != x.dims().ext[d])
      throw shape_error(std::string(op) + ": index shape " + to_string(index.dims) +
                        " differs from input shape " + to_string(x.dims()) + " outside axis " +
                        std::to_string(ax));
  index_t bound = x.dims().ext[ax];
  for (std::size_t i = 0; i < index.values.size(); ++i)
    detail::check_index(op, index.values[i], index_t(i), bound, ax);
  tensor<T> y = tensor<T>::empty(index.dims);
  tensor<T> xv = x.value();
  detail::for_each_index(index.dims, [&](index_t flat, index_t const *idx) {
    index_t j[max_rank];
    for (int d = 0; d < x.rank(); ++d)
      j[d] = idx[d];
    j[ax] = index.values[std::size_t(flat)];
    y.data()[flat] = xv.data()[detail::offset_of(xv, j)];
  });
  auto sx = x.slot();
  return detail::record_op<T>("gather", x.owner(), y, bool(sx), [sx, ax, index](tensor<T> gy) {
    tensor<T> g = tape::grad_zeroed(*sx);
    tensor<T> gc = gy.contiguous();
    detail::for_each_index(index.dims, [&](index_t flat, index_t const *idx) {
      index_t j[max_rank];
      for (int d = 0; d < g.rank(); ++d)
        j[d] = idx[d];
      j[ax] = index.values[std::size_t(flat)];
      g.data()[detail::offset_of(g, j)] += gc.data()[flat];
    });
  });
}

} // namespace dualcast
