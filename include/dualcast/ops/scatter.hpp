// dualcast/ops/scatter.hpp: writing into a copy of x at indices, with PyTorch's semantics, on
// tape variables (x or src may be a constant tensor: index_add into zeros is a segment sum).
//
//   index_add(x, axis, {0, 2, 0}, src)   // y = x; y[.., idx[i], ..] += src[.., i, ..]
//   scatter_add(x, axis, index, src)     // y = x; y[.., index[p], ..] += src[p] (p over index)
//   scatter(x, axis, index, src)         // y = x; y[.., index[p], ..]  = src[p]
//
// index_add: src has x's shape with extent idx.size() along `axis`. scatter / scatter_add: index
// (an index_array of x's rank) has src's shape, and extents at most x's outside `axis` (like
// torch.scatter, which also allows a larger src; here src and index have one shape). Indices
// may be negative (from the end); out of range throws index_error. Duplicate indices: index_add
// and scatter_add sum; scatter keeps the value of the LAST duplicate along the axis (PyTorch
// leaves it unspecified; here it is deterministic). Adjoints: dx = dy (scatter: 0 at the
// overwritten elements); dsrc = dy gathered at the indices (scatter: only the surviving
// duplicate gets it, the others 0). Run on the operands' device; on a tape over duals (host only)
// on the value and on each partial apart (all three are linear in x and src).
#pragma once

#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/ops/indexing.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <string>
#include <unordered_map>
#include <vector>

namespace dualcast {

namespace detail {
template <class X> struct operand_elem { using type = typename var_of_t<X>::value_type; };
template <class T> struct operand_elem<tensor<T>> { using type = T; };
template <class X> using operand_elem_t = typename operand_elem<std::remove_cvref_t<X>>::type;
// A variable (a lazy expression materialised) or a tensor (a constant), as custom_op takes it.
template <class X> decltype(auto) as_operand(X const &x) {
  if constexpr (is_tensor_v<X>)
    return (x);
  else
    return as_var(x);
}

struct scatter_mul_fn {
  template <class A, class B> DUALCAST_HD auto operator()(A const &a, B const &b) const {
    return a * b;
  }
};
inline constexpr kernel<scatter_mul_fn> scatter_mul_kernel{scatter_mul_fn{}};

// Checks the index's shape (is) against x (xs) and src (ss) for scatter / scatter_add.
inline void scatter_shapes(char const *op, shape const &xs, int ax, shape const &is,
                           shape const &ss) {
  if (is.rank != xs.rank)
    throw shape_error(std::string(op) + ": index of shape " + to_string(is) + " (" +
                      std::to_string(is.size()) + " values) does not fit input of shape " +
                      to_string(xs));
  if (!(ss == is))
    throw shape_error(std::string(op) + ": src of shape " + to_string(ss) +
                      " differs from the index's shape " + to_string(is));
  for (int d = 0; d < xs.rank; ++d)
    if (d != ax && is.ext[d] > xs.ext[d])
      throw shape_error(std::string(op) + ": index shape " + to_string(is) +
                        " exceeds input shape " + to_string(xs) + " outside axis " +
                        std::to_string(ax));
}

// 1 where an element of the index (row-major) is the last along `axis` to write its target,
// else 0; empty when no target is written twice.
template <class T>
std::vector<T> last_writers(shape const &s, int ax, std::vector<index_t> const &idx,
                            index_t bound) {
  std::unordered_map<index_t, std::size_t> last; // (line, target) -> position
  std::vector<index_t> c(std::size_t(s.rank), 0);
  for (std::size_t p = 0; p < idx.size(); ++p) {
    index_t line = 0;
    for (int d = 0; d < s.rank; ++d)
      if (d != ax)
        line = line * s.ext[d] + c[std::size_t(d)];
    last[line * bound + idx[p]] = p;
    for (int d = s.rank - 1; d >= 0 && ++c[std::size_t(d)] == s.ext[d]; --d) // next coordinate
      c[std::size_t(d)] = 0;
  }
  if (last.size() == idx.size())
    return {};
  std::vector<T> w(idx.size(), T(0));
  for (auto const &kv : last)
    w[kv.second] = T(1);
  return w;
}

template <class X, class S, class I>
auto scatter_like(char const *op, char const *name, X const &x, int axis, tensor<I> const &index,
                  S const &src, bool overwrite) {
  using T = operand_elem_t<X>;
  auto const &xo = as_operand(x);
  auto const &so = as_operand(src);
  shape const xs = xo.dims(), ss = so.dims(), is = index.dims();
  device const dev = value_of_input<T>(xo).dev();
  require_index_tensor(op, index, dev);
  int const ax = normalize_axis(op, axis, xs.rank);
  scatter_shapes(op, xs, ax, is, ss);
  auto const on_stream = operands_stream_scope(dev, xo, so); // (CUDA: the tape's stream)
  auto idx = normalized_indices(op, ambient_cpu(), index, xs.ext[ax], ax);
  using R = scalar_of_t<T>; // (T itself, or the real type of a tape over duals)
  tensor<R> winners;        // scatter with duplicates: which src elements survive
  if (overwrite) {          // (found on the host: device indices are copied there for it)
    auto w = last_writers<R>(is, ax, idx.to_vector(), xs.ext[ax]);
    if (!w.empty())
      winners = tensor<R>::from(is, w).to(dev);
  }
  return custom_op(
      name,
      [&](auto const &, auto &ctx, tensor<T> const &xv, tensor<T> const &sv) {
        tensor<T> y = xv.clone();
        run_index_lines<true>(op, ctx.host(), y, sv, ax, idx, true, overwrite);
        return y;
      },
      [=](auto const &ex, auto const &, auto &g) {
        tensor<T> gy = g.out(0);
        if (g.needs(0)) {
          if (overwrite) { // dy with zeros where src was written
            tensor<T> t = gy.clone();
            run_index_lines<true>(op, g.host(), t, tensor<T>::zeros(is, t.dev()), ax, idx, true,
                                  true);
            g.add(0, t);
          } else {
            g.add(0, gy);
          }
        }
        if (g.needs(1)) {
          tensor<T> d = tensor<T>::empty(is, gy.dev());
          run_index_lines<false>(op, g.host(), gy, d, ax, idx, true);
          if (winners.defined()) // (on duals: each part, a product by a constant)
            d = linear_parts(d, [&](tensor<R> c) {
              apply(ex, scatter_mul_kernel, out(c.raw_view()), c.cview(), winners.cview());
              return c;
            });
          g.add(1, d);
        }
      },
      xo, so);
}
} // namespace detail

template <class X, class I, class S>
requires((var_like<X> || is_tensor_v<X>)&&(var_like<S> || is_tensor_v<S>)) auto index_add(
    X const &x, int axis, tensor<I> const &indices, S const &src) {
  DUALCAST_REFUSE_FLOAT16("index_add", X, S);
  using T = detail::operand_elem_t<X>;
  char const *op = "dualcast::index_add";
  auto const &xo = detail::as_operand(x);
  auto const &so = detail::as_operand(src);
  shape const xs = xo.dims(), ss = so.dims();
  device const dev = detail::value_of_input<T>(xo).dev();
  detail::require_index_tensor(op, indices, dev);
  int const ax = detail::normalize_axis(op, axis, xs.rank);
  if (indices.rank() != 1)
    throw shape_error(std::string(op) + ": indices of shape " + to_string(indices.dims()) +
                      " (want one axis)");
  shape want = xs;
  want.ext[ax] = indices.size();
  if (!(ss == want))
    throw shape_error(std::string(op) + ": src of shape " + to_string(ss) + " for input " +
                      to_string(xs) + " and " + std::to_string(indices.size()) +
                      " indices along axis " + std::to_string(ax) + " (want " + to_string(want) +
                      ")");
  auto const on_stream = detail::operands_stream_scope(dev, xo, so);
  auto idx = detail::normalized_indices(op, detail::ambient_cpu(), indices, xs.ext[ax], ax);
  return custom_op(
      "index_add",
      [&](auto const &, auto &ctx, tensor<T> const &xv, tensor<T> const &sv) {
        tensor<T> y = xv.clone();
        detail::run_index_lines<true>(op, ctx.host(), y, sv, ax, idx, false);
        return y;
      },
      [ss, ax, idx, op](auto const &, auto const &, auto &g) {
        tensor<T> gy = g.out(0);
        if (g.needs(0))
          g.add(0, gy);
        if (g.needs(1)) { // index_select of dy
          tensor<T> d = tensor<T>::empty(ss, gy.dev());
          detail::run_index_lines<false>(op, g.host(), gy, d, ax, idx, false);
          g.add(1, d);
        }
      },
      xo, so);
}

// The convenience: indices from the host, copied to x's device.
template <class X, class S>
requires((var_like<X> || is_tensor_v<X>)&&(var_like<S> || is_tensor_v<S>)) auto index_add(
    X const &x, int axis, std::vector<index_t> const &indices, S const &src) {
  auto const &xo = detail::as_operand(x);
  auto const &so = detail::as_operand(src);
  device const dev = detail::value_of_input<detail::operand_elem_t<X>>(xo).dev();
  auto const on_stream = detail::operands_stream_scope(dev, xo, so);
  return index_add(xo, axis, detail::upload_indices("dualcast::index_add", indices, dev), so);
}

template <class X, class I, class S>
requires((var_like<X> || is_tensor_v<X>)&&(var_like<S> || is_tensor_v<S>)) auto scatter_add(
    X const &x, int axis, tensor<I> const &index, S const &src) {
  DUALCAST_REFUSE_FLOAT16("scatter_add", X, S);
  return detail::scatter_like("dualcast::scatter_add", "scatter_add", x, axis, index, src, false);
}
template <class X, class S>
requires((var_like<X> || is_tensor_v<X>)&&(var_like<S> || is_tensor_v<S>)) auto scatter_add(
    X const &x, int axis, index_array const &index, S const &src) {
  auto const &xo = detail::as_operand(x);
  auto const &so = detail::as_operand(src);
  device const dev = detail::value_of_input<detail::operand_elem_t<X>>(xo).dev();
  auto const on_stream = detail::operands_stream_scope(dev, xo, so);
  return scatter_add(xo, axis, detail::index_tensor("dualcast::scatter_add", index, xo.dims(), dev),
                     so);
}
template <class X, class I, class S>
requires((var_like<X> || is_tensor_v<X>)&&(var_like<S> || is_tensor_v<S>)) auto scatter(
    X const &x, int axis, tensor<I> const &index, S const &src) {
  DUALCAST_REFUSE_FLOAT16("scatter", X, S);
  return detail::scatter_like("dualcast::scatter", "scatter", x, axis, index, src, true);
}
template <class X, class S>
requires((var_like<X> || is_tensor_v<X>)&&(var_like<S> || is_tensor_v<S>)) auto scatter(
    X const &x, int axis, index_array const &index, S const &src) {
  auto const &xo = detail::as_operand(x);
  auto const &so = detail::as_operand(src);
  device const dev = detail::value_of_input<detail::operand_elem_t<X>>(xo).dev();
  auto const on_stream = detail::operands_stream_scope(dev, xo, so);
  return scatter(xo, axis, detail::index_tensor("dualcast::scatter", index, xo.dims(), dev), so);
}

} // namespace dualcast
