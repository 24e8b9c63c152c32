// dualcast/ops/indexing.hpp: index_select, gather, flip and masked_select on tape variables, with
// their adjoints (scatter-add of the output gradient).
//
//   index_select(x, axis, {2, 0, -1})   // numpy take(x, idx, axis)
//   gather(x, axis, index)              // numpy take_along_axis; index: integer array of x's
//                                       // rank, same extents as x except along `axis`
//   flip(x, {0, -1})                    // reversed along the given axes (a copy)
//   masked_select(x, mask)              // the elements where mask != 0, 1-D
// Negative indices count from the end (-1: the last), like PyTorch; an index outside
// [-extent, extent) throws dualcast::index_error naming the index and the bound.
// The indices are integer tensors (tensor<std::int32_t> / <std::int64_t>) on the operand's
// device, which stay there, or host conveniences (std::vector<index_t>, index_array) copied
// there; the adjoints are scatter-adds without atomics (index_lines below). On a tape over duals
// (host only) each operation runs on the value and on each partial apart: all are linear.
#pragma once

#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/ops/shape_ops.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace dualcast {

// An integer array (indices), row-major.
struct index_array {
  shape dims;
  std::vector<index_t> values;
};

namespace detail {
// v with a negative index counted from the end; checked against [-bound, bound).
inline index_t check_index(char const *op, index_t v, index_t pos, index_t bound, int axis) {
  if (v < -bound || v >= bound)
    throw index_error(std::string(op) + ": index " + std::to_string(v) + " at position " +
                      std::to_string(pos) + " is out of range [-" + std::to_string(bound) + ", " +
                      std::to_string(bound) + ") for axis " + std::to_string(axis));
  return v < 0 ? v + bound : v;
}
inline std::vector<index_t> checked_indices(char const *op, std::vector<index_t> idx, index_t bound,
                                            int axis) {
  for (std::size_t i = 0; i < idx.size(); ++i)
    idx[i] = check_index(op, idx[i], index_t(i), bound, axis);
  return idx;
}

// One line of the output: every position along `axis` for fixed other coordinates (line l in
// row-major order of those). Gather: dst[.., i, ..] = src[.., idx, ..]; scatter (the adjoint):
// dst[.., idx, ..] += src[.., i, ..]. A row operation (parallel_for_rows): lines write disjoint
// elements, and within a line each destination element receives its terms in the order of the
// positions, so the scatter-add needs no atomics and its sums are the same bits on the CPU (one
// thread per line, sequential) and on CUDA (one warp per line, below) at any thread count.
template <class T, bool Scatter> struct index_lines {
  int rank = 0, axis = 0;
  index_t ext[max_rank] = {}; // the output's extents
  index_t xs[max_rank] = {};  // strides of the indexed array (x, or its gradient)
  index_t ys[max_rank] = {};  // strides of the output (y, or its gradient)
  T const *src = nullptr;
  T *dst = nullptr;
  index_t const *idx = nullptr;
  bool per_element = false; // gather: one index per output element (contiguous, output shape);
                            // index_select: idx[i] for position i along the axis
  bool overwrite = false;   // Scatter: dst = src instead of += (the last along the line wins)

  // Where line l starts: in x (xo), in y (yo) and in the indices (io, istride between positions).
  struct line_origin {
    index_t xo = 0, yo = 0, io = 0, istride = 1;
  };
  DUALCAST_HD line_origin origin(index_t l) const {
    line_origin o;
    index_t cstride = 1, rem = l;
    for (int d = rank - 1; d >= 0; --d) {
      if (d == axis) {
        o.istride = cstride;
      } else {
        index_t c = rem % ext[d];
        rem /= ext[d];
        o.xo += c * xs[d];
        o.yo += c * ys[d];
        o.io += c * cstride;
      }
      cstride *= ext[d];
    }
    if (!per_element)
      o.io = 0, o.istride = 1;
    return o;
  }

  template <class Lanes> DUALCAST_HD void operator()(index_t l, Lanes const &lanes) const {
    line_origin const o = origin(l);
    if constexpr (Scatter) {
      scatter_line(o, lanes);
    } else {
      // the lanes take every count()-th position (positions read into distinct elements)
      // (not unrolled: nvcc's 4x unrolling of this gather made ptxas for sm_90 spill)
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (index_t i = lanes.lane(); i < ext[axis]; i += lanes.count())
        dst[o.yo + i * ys[axis]] = src[o.xo + idx[o.io + i * o.istride] * xs[axis]];
    }
  }

  // The scatter, count() positions at a time: the lanes holding the same destination form a
  // group whose lowest lane (its leader) reads the destination once, adds the group's values in
  // lane order (= position order) and writes it back. One lane (the CPU): the sequential loop.
  template <class Lanes>
  DUALCAST_HD void scatter_line(line_origin const &o, Lanes const &lanes) const {
    int const me = lanes.lane(), n = lanes.count();
    for (index_t first = 0; first < ext[axis]; first += n) { // the same trips on every lane
      index_t const i = first + me;
      bool const here = i < ext[axis];
      index_t const at = here ? o.xo + idx[o.io + i * o.istride] * xs[axis] : index_t(-1);
      T const v = here ? src[o.yo + i * ys[axis]] : T(0);
      unsigned const group = lanes.group_of(at);
      bool const leader = here && (group & ((1u << me) - 1u)) == 0u;
      T acc = leader && !overwrite ? dst[at] : T(0);
      for (int k = 0; k < n; ++k) {
        T const vk = lanes.broadcast(v, k);
        if (leader && ((group >> k) & 1u))
          acc = overwrite ? vk : acc + vk;
      }
      if (leader)
        dst[at] = acc;
      lanes.sync(); // the next positions' leaders read what these wrote
    }
  }
};

// The indices as a 1-D tensor on d (in the ABI namespace: the copy differs between nvcc and
// host-compiler translation units, tensor/detail/device_dispatch.hpp).
inline namespace DUALCAST_TAPE_ABI {
inline tensor<index_t> upload_indices(char const *op, std::vector<index_t> const &v,
                                      device const &d) {
  auto t = tensor<index_t>::empty(shape{index_t(v.size())}, d);
  copy_bytes(op, t.raw_data(), d, v.data(), device::host(), v.size() * sizeof(index_t));
  return t;
}
} // namespace DUALCAST_TAPE_ABI

// Integer tensors as indices: I must be std::int32_t or std::int64_t (a float tensor is refused
// at compile time), on the operand's device.
template <class I>
void require_index_tensor(char const *op, tensor<I> const &idx, device const &d) {
  static_assert(is_index_element_v<I>,
                "dualcast: indices are a tensor<std::int32_t> or tensor<std::int64_t> (or a "
                "std::vector<index_t>), not a tensor of floating-point values");
  if (!idx.defined())
    throw error(std::string(op) + ": the index tensor is undefined");
  if (!(idx.dev() == d))
    throw device_error(std::string(op) + ": indices on " + to_string(idx.dev()) +
                       " but the operand on " + to_string(d) +
                       " (move them with tensor::to; indices are not copied between devices)");
}

// dst[i] = src[i] as index_t, negative counted from the end of [-bound, bound); *bad = 1 where
// one is out of range (all writers store the same value). The device-side check: its flag is the
// one value copied back.
template <class I> struct normalize_indices {
  I const *src;
  index_t *dst, *bad;
  index_t bound;
  DUALCAST_HD void operator()(index_t i) const {
    index_t const v = index_t(src[i]);
    if (v < -bound || v >= bound) {
      *bad = 1;
      dst[i] = 0;
    } else {
      dst[i] = v < 0 ? v + bound : v;
    }
  }
};
// dst[i] = src[i] as index_t, unchecked (reduce_by_index ignores out-of-range indices).
template <class I> struct widen_indices {
  I const *src;
  index_t *dst;
  DUALCAST_HD void operator()(index_t i) const { dst[i] = index_t(src[i]); }
};

// The indices of idx (any shape, on its device), checked against [-bound, bound) and normalised,
// as a contiguous index_t tensor of idx's shape on the same device. Host indices are checked on
// the host (the first bad one named, as checked_indices does); device indices by a pass on the
// device that raises a flag, copied back (one value); only when it is raised are the indices
// copied to the host to name the first bad one with the same message.
template <class I>
tensor<index_t> normalized_indices(char const *op, cpu const &host, tensor<I> const &idx,
                                   index_t bound, int axis) {
  tensor<I> const c = idx.contiguous();
  auto r = tensor<index_t>::empty(idx.dims(), idx.dev());
  index_t const n = idx.size();
  if (idx.dev().is_host()) {
    for (index_t i = 0; i < n; ++i)
      r.raw_data()[i] = check_index(op, index_t(c.data()[i]), i, bound, axis);
    return r;
  }
  auto flag = tensor<index_t>::zeros(shape{}, idx.dev());
  on_device(op, idx.dev(), host, [&](auto const &ex) {
    dualcast::for_each(ex, n, normalize_indices<I>{c.data(), r.raw_data(), flag.raw_data(), bound});
  });
  if (flag.item() != 0) {
    auto const v = c.to_vector();
    for (index_t i = 0; i < n; ++i)
      check_index(op, index_t(v[std::size_t(i)]), i, bound, axis);
  }
  return r;
}
// The indices as a contiguous index_t tensor on their device, unchecked: idx itself where it is
// one (no copy), else widened by one pass on its device.
template <class I>
tensor<index_t> widened_indices(char const *op, cpu const &host, tensor<I> const &idx) {
  if constexpr (std::is_same_v<I, index_t>) {
    return idx.contiguous();
  } else {
    tensor<I> const c = idx.contiguous();
    auto r = tensor<index_t>::empty(idx.dims(), idx.dev());
    on_device(op, idx.dev(), host, [&](auto const &ex) {
      dualcast::for_each(ex, c.size(), widen_indices<I>{c.data(), r.raw_data()});
    });
    return r;
  }
}

// index_lines on the CPU where the dimensions after the axis are contiguous in both arrays (an
// embedding's rows: index_select along axis 0 of a matrix) and one index serves every line
// (index_select, index_add): the lines of a chunk of columns in step, position after position,
// so that each position moves `chunk` contiguous elements (a vector copy or add) where a line
// touched one element per row. Each destination element still receives its terms in the order
// of the positions, one after another: the same bits as index_lines. (The char-LSTM step's
// embedding and its adjoint: 25 % of the step as lines, each line a column of 64 rows 8 KiB
// apart.)
template <class T, bool Scatter> struct index_blocks {
  static constexpr index_t chunk = 512; // columns per row of work
  int axis = 0;                         // (outer dimensions: those before it)
  index_t ext[max_rank] = {}, xs[max_rank] = {}, ys[max_rank] = {};
  index_t n_ax = 0, inner = 0, chunks = 0; // positions, contiguous elements after the axis
  T const *src = nullptr;
  T *dst = nullptr;
  index_t const *idx = nullptr;
  bool overwrite = false;
  void operator()(index_t r) const {
    index_t rem = r / chunks, xo = 0, yo = 0;
    for (int d = axis - 1; d >= 0; --d) {
      index_t const c = rem % ext[d];
      rem /= ext[d];
      xo += c * xs[d], yo += c * ys[d];
    }
    index_t const c0 = (r % chunks) * chunk, m = std::min(chunk, inner - c0);
    xo += c0, yo += c0;
    for (index_t i = 0; i < n_ax; ++i) {
      T const *__restrict s = src + (Scatter ? yo + i * ys[axis] : xo + idx[i] * xs[axis]);
      T *__restrict t = dst + (Scatter ? xo + idx[i] * xs[axis] : yo + i * ys[axis]);
      if (!Scatter || overwrite)
        for (index_t j = 0; j < m; ++j)
          t[j] = s[j];
      else
        for (index_t j = 0; j < m; ++j)
          t[j] = t[j] + s[j];
    }
  }
};
// Whether the dimensions after `axis` are contiguous (row-major, stride 1 last) in t.
template <class T> bool contiguous_after(tensor<T> const &t, int axis) {
  index_t want = 1;
  for (int d = t.rank() - 1; d > axis; --d) {
    if (t.extent(d) != 1 && t.stride(d) != want)
      return false;
    want *= t.extent(d);
  }
  return true;
}

// Runs the lines of y (shape ys_) against x: gather (Scatter = false: y = x[idx]) or scatter-add
// (true: x += y at idx; x = y at idx with overwrite), on x's device.
template <bool Scatter, class T>
void run_index_lines(char const *op, cpu const &host, tensor<T> const &x, tensor<T> const &y,
                     int axis, tensor<index_t> const &idx, bool per_element,
                     bool overwrite = false) {
  index_t inner = 1, outer = 1;
  for (int d = axis + 1; d < y.rank(); ++d)
    inner *= y.extent(d);
  bool distinct_outer = true; // (a scatter's target broadcast along an outer dimension: lines)
  for (int d = 0; d < axis; ++d) {
    outer *= y.extent(d);
    distinct_outer = distinct_outer && (x.extent(d) == 1 || x.stride(d) != 0);
  }
  if (x.dev().is_host() && !per_element && inner >= 16 && (!Scatter || distinct_outer) &&
      contiguous_after(x, axis) && contiguous_after(y, axis)) {
    index_blocks<T, Scatter> f;
    f.axis = axis;
    for (int d = 0; d <= axis; ++d)
      f.ext[d] = y.extent(d), f.xs[d] = x.stride(d), f.ys[d] = y.stride(d);
    f.n_ax = y.extent(axis), f.inner = inner;
    f.chunks = (inner + f.chunk - 1) / f.chunk;
    f.src = Scatter ? y.data() : x.data();
    f.dst = Scatter ? x.raw_data() : y.raw_data();
    f.idx = idx.data();
    f.overwrite = overwrite;
    if (f.n_ax > 0)
      parallel_for(host, outer * f.chunks, f.n_ax * std::min(inner, f.chunk), f);
    return;
  }
  index_lines<T, Scatter> f;
  f.rank = y.rank();
  f.axis = axis;
  for (int d = 0; d < y.rank(); ++d)
    f.ext[d] = y.extent(d), f.xs[d] = x.stride(d), f.ys[d] = y.stride(d);
  f.src = Scatter ? y.data() : x.data();
  f.dst = Scatter ? x.raw_data() : y.raw_data(); // (a gradient, or a fresh result)
  f.idx = idx.data();
  f.per_element = per_element;
  f.overwrite = overwrite;
  index_t n_ax = y.extent(axis), lines = n_ax > 0 ? y.size() / n_ax : 0;
  on_device(op, x.dev(), host, [&](auto const &ex) { parallel_for_rows(ex, lines, n_ax, f); });
}
// The same on a tape over duals (host only): a gather or scatter-add is linear, so it runs the
// plain lines on each part (the value, then each partial): the values are the plain tape's bits.
template <bool Scatter, class R, int K>
void run_index_lines(char const *op, cpu const &host, tensor<dual<R, K>> const &x,
                     tensor<dual<R, K>> const &y, int axis, tensor<index_t> const &idx,
                     bool per_element, bool overwrite = false) {
  for (int c = -1; c < K; ++c) {
    tensor<R> xc = dual_component(x, c);
    tensor<R> yc = Scatter ? dual_component(y, c) : tensor<R>::empty(y.dims(), y.dev());
    run_index_lines<Scatter>(op, host, xc, yc, axis, idx, per_element, overwrite);
    if constexpr (Scatter)
      set_dual_component(x, c, xc);
    else
      set_dual_component(y, c, yc);
  }
}
} // namespace detail

// index_select with the indices in a 1-D integer tensor on x's device (they stay there: checked
// there, see detail::normalized_indices).
template <var_like X, class I> auto index_select(X const &xin, int axis, tensor<I> const &indices) {
  DUALCAST_REFUSE_FLOAT16("index_select", X);
  using T = typename detail::var_of_t<X>::value_type;
  char const *op = "dualcast::index_select";
  auto const &x = detail::as_var(xin);
  detail::require_index_tensor(op, indices, x.value().dev());
  int ax = detail::normalize_axis(op, axis, x.rank());
  if (indices.rank() != 1)
    throw shape_error(std::string(op) + ": indices of shape " + to_string(indices.dims()) +
                      " (want one axis)");
  shape s = x.dims();
  s.ext[ax] = indices.size();
  auto const on_stream = detail::tape_stream_scope(x.owner(), x.value().dev());
  auto idx = detail::normalized_indices(op, detail::ambient_cpu(), indices, x.dims().ext[ax], ax);
  return custom_op(
      "index_select",
      [&](auto const &, auto &ctx, tensor<T> const &xv) {
        tensor<T> y = tensor<T>::empty(s, xv.dev());
        detail::run_index_lines<false>(op, ctx.host(), xv, y, ax, idx, false);
        return y;
      },
      [ax, idx, op](auto const &, auto const &, auto &g) {
        if (g.needs(0))
          detail::run_index_lines<true>(op, g.host(), g.zeroed(0), g.out(0), ax, idx, false);
      },
      x);
}
// The convenience: indices from the host, copied to x's device.
template <var_like X>
auto index_select(X const &xin, int axis, std::vector<index_t> const &indices) {
  auto const &x = detail::as_var(xin);
  auto const on_stream = detail::tape_stream_scope(x.owner(), x.value().dev());
  return index_select(x, axis,
                      detail::upload_indices("dualcast::index_select", indices, x.value().dev()));
}

// gather with the index in an integer tensor of x's rank on x's device.
template <var_like X, class I> auto gather(X const &xin, int axis, tensor<I> const &index) {
  DUALCAST_REFUSE_FLOAT16("gather", X);
  using T = typename detail::var_of_t<X>::value_type;
  char const *op = "dualcast::gather";
  auto const &x = detail::as_var(xin);
  detail::require_index_tensor(op, index, x.value().dev());
  int ax = detail::normalize_axis(op, axis, x.rank());
  shape const is = index.dims();
  if (is.rank != x.rank())
    throw shape_error(std::string(op) + ": index of shape " + to_string(is) + " (" +
                      std::to_string(is.size()) + " values) does not fit input of shape " +
                      to_string(x.dims()));
  for (int d = 0; d < x.rank(); ++d)
    if (d != ax && is.ext[d] != x.dims().ext[d])
      throw shape_error(std::string(op) + ": index shape " + to_string(is) +
                        " differs from input shape " + to_string(x.dims()) + " outside axis " +
                        std::to_string(ax));
  auto const on_stream = detail::tape_stream_scope(x.owner(), x.value().dev());
  auto idx = detail::normalized_indices(op, detail::ambient_cpu(), index, x.dims().ext[ax], ax);
  return custom_op(
      "gather",
      [&](auto const &, auto &ctx, tensor<T> const &xv) {
        tensor<T> y = tensor<T>::empty(is, xv.dev());
        detail::run_index_lines<false>(op, ctx.host(), xv, y, ax, idx, true);
        return y;
      },
      [ax, idx, op](auto const &, auto const &, auto &g) {
        if (g.needs(0))
          detail::run_index_lines<true>(op, g.host(), g.zeroed(0), g.out(0), ax, idx, true);
      },
      x);
}

namespace detail {
// An index_array as an index tensor on d (its values counted against its shape first; xs: the
// input's shape, for the message).
inline tensor<index_t> index_tensor(char const *op, index_array const &index, shape const &xs,
                                    device const &d) {
  if (index_t(index.values.size()) != index.dims.size())
    throw shape_error(std::string(op) + ": index of shape " + to_string(index.dims) + " (" +
                      std::to_string(index.values.size()) +
                      " values) does not fit input of shape " + to_string(xs));
  return upload_indices(op, index.values, d).reshape(index.dims);
}
} // namespace detail

// The convenience: the index from the host, copied to x's device.
template <var_like X> auto gather(X const &xin, int axis, index_array const &index) {
  auto const &x = detail::as_var(xin);
  auto const on_stream = detail::tape_stream_scope(x.owner(), x.value().dev());
  return gather(x, axis,
                detail::index_tensor("dualcast::gather", index, x.dims(), x.value().dev()));
}

namespace detail {
// t reversed along the axes of `mask`: one gather pass per axis, on t's device.
template <class T>
tensor<T> flipped(char const *op, cpu const &host, tensor<T> t, std::vector<bool> const &mask) {
  for (int d = 0; d < t.rank(); ++d) {
    index_t n = t.extent(d);
    if (!mask[std::size_t(d)] || n < 2)
      continue;
    std::vector<index_t> rev(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i)
      rev[std::size_t(i)] = n - 1 - i;
    tensor<T> y = tensor<T>::empty(t.dims(), t.dev());
    run_index_lines<false>(op, host, t, y, d, upload_indices(op, rev, t.dev()), false);
    t = y;
  }
  return t.contiguous();
}
} // namespace detail

// x reversed along `axes` (PyTorch's flip; NumPy's x[::-1] along each). A copy: views have
// positive strides here (slice takes step > 0). The gradient is the output's, flipped back.
template <var_like X> auto flip(X const &xin, std::vector<int> const &axes) {
  DUALCAST_REFUSE_FLOAT16("flip", X);
  using T = typename detail::var_of_t<X>::value_type;
  char const *op = "dualcast::flip";
  auto const &x = detail::as_var(xin);
  if (axes.empty())
    throw index_error(std::string(op) + ": no axis given");
  auto mask = detail::axis_mask(op, axes, x.rank());
  return custom_op(
      "flip",
      [&](auto const &, auto &ctx, tensor<T> const &xv) {
        return detail::flipped(op, ctx.host(), xv, mask);
      },
      [mask, op](auto const &, auto const &, auto &g) {
        if (g.needs(0))
          g.add(0, detail::flipped(op, g.host(), g.out(0), mask));
      },
      x);
}

// The elements of x where mask != 0, in row-major order, as a 1-D variable (PyTorch's
// masked_select; mask: a tensor broadcast to x's shape). index_select of the flattened x: the
// gradient scatters back to the selected positions (0 elsewhere).
template <var_like X, class T> auto masked_select(X const &xin, tensor<T> const &mask) {
  DUALCAST_REFUSE_FLOAT16("masked_select", X);
  char const *op = "dualcast::masked_select";
  auto const &x = detail::as_var(xin);
  shape const s = x.dims();
  bool ok = true;
  shape const b = broadcast_pair(mask.dims(), s, ok);
  if (!ok || !(b == s))
    throw shape_error(std::string(op) + ": mask of shape " + to_string(mask.dims()) +
                      " does not broadcast to shape " + to_string(s));
  auto const on_stream = detail::tape_stream_scope(x.owner(), mask.dev());
  auto m = mask.to(device::host()).broadcast_to(s).contiguous().to_vector();
  std::vector<index_t> at;
  for (std::size_t i = 0; i < m.size(); ++i)
    if (m[i] != T(0))
      at.push_back(index_t(i));
  return index_select(reshape(x, shape{s.size()}), 0, at);
}

} // namespace dualcast
