// dualcast/ops/shape_ops.hpp: transpose, permute, reshape, squeeze / unsqueeze, slice, split,
// concat, stack, broadcast_to and repeat on tape variables. Transposes, permutations, slices
// (and so split's pieces) and broadcasts are views (no copy; they share the input's storage and
// version counter); reshape, squeeze and unsqueeze are views when the input is contiguous. Copies
// (concat, stack, repeat, reshape of a non-contiguous input) and the adjoints run on the
// operand's device. Axes may be negative (counting from the end), and so may slice bounds.
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <memory>
#include <string>
#include <vector>

namespace dualcast {

namespace detail {
template <class T> var<T> transpose_var(var<T> const &x, int a0, int b0) {
  int const rank = detail::as_var(x).rank();
  int const a = detail::normalize_axis("dualcast::transpose", a0, rank);
  int const b = detail::normalize_axis("dualcast::transpose", b0, rank);
  return custom_op(
      "transpose", [&](auto const &, auto &, auto const &xv) { return xv.transposed(a, b); },
      [a, b](auto const &, auto const &, auto &g) { g.add(0, g.out(0).transposed(a, b)); }, x);
}
} // namespace detail
template <var_like X> auto transpose(X const &x, int a0 = 0, int b0 = 1) {
  DUALCAST_REFUSE_FLOAT16("transpose", X);
  return detail::transpose_var(detail::as_var(x), a0, b0);
}

namespace detail {
template <class T> var<T> permute_var(var<T> const &x, std::vector<int> const &perm_in) {
  int const rank = detail::as_var(x).rank();
  std::vector<int> perm(perm_in);
  std::vector<bool> seen(std::size_t(rank), false);
  if (int(perm.size()) != rank)
    throw shape_error("dualcast::permute: a permutation of " + std::to_string(perm.size()) +
                      " axes for rank " + std::to_string(rank));
  for (auto &p : perm) {
    p = detail::normalize_axis("dualcast::permute", p, rank);
    if (seen[std::size_t(p)])
      throw index_error("dualcast::permute: axis " + std::to_string(p) + " is given twice");
    seen[std::size_t(p)] = true;
  }
  auto inv = detail::inverse_perm(perm);
  return custom_op(
      "permute", [&](auto const &, auto &, auto const &xv) { return xv.permuted(perm); },
      [inv](auto const &, auto const &, auto &g) { g.add(0, g.out(0).permuted(inv)); }, x);
}
} // namespace detail
template <var_like X> auto permute(X const &x, std::vector<int> const &perm_in) {
  DUALCAST_REFUSE_FLOAT16("permute", X);
  return detail::permute_var(detail::as_var(x), perm_in);
}

namespace detail {
template <class T> var<T> reshape_var(var<T> const &x, shape const &s) {
  shape const from = detail::as_var(x).dims();
  return custom_op(
      "reshape", [&](auto const &, auto &, auto const &xv) { return xv.reshape(s); },
      [from](auto const &, auto const &, auto &g) { g.add(0, g.out(0).reshape(from)); }, x);
}
} // namespace detail
template <var_like X> auto reshape(X const &x, shape const &s) {
  DUALCAST_REFUSE_FLOAT16("reshape", X);
  return detail::reshape_var(detail::as_var(x), s);
}

// Removes axis `axis` when its extent is 1; another extent leaves x unchanged (PyTorch's
// squeeze(dim), where NumPy would throw).
template <var_like X> auto squeeze(X const &x, int axis) {
  DUALCAST_REFUSE_FLOAT16("squeeze", X);
  shape const s = detail::as_var(x).dims();
  int const ax = detail::normalize_axis("dualcast::squeeze", axis, s.rank);
  shape r;
  for (int d = 0; d < s.rank; ++d)
    if (d != ax || s.ext[d] != 1)
      r.ext[r.rank++] = s.ext[d];
  return reshape(x, r);
}
// Removes every axis of extent 1.
template <var_like X> auto squeeze(X const &x) {
  DUALCAST_REFUSE_FLOAT16("squeeze", X);
  shape const s = detail::as_var(x).dims();
  shape r;
  for (int d = 0; d < s.rank; ++d)
    if (s.ext[d] != 1)
      r.ext[r.rank++] = s.ext[d];
  return reshape(x, r);
}
// Inserts an axis of extent 1 at position `axis` of the result (-1: last).
template <var_like X> auto unsqueeze(X const &x, int axis) {
  DUALCAST_REFUSE_FLOAT16("unsqueeze", X);
  shape const s = detail::as_var(x).dims();
  if (s.rank >= max_rank)
    throw shape_error("dualcast::unsqueeze: shape " + to_string(s) + " has the largest rank");
  int const ax = detail::normalize_axis("dualcast::unsqueeze", axis, s.rank + 1);
  shape r;
  r.rank = s.rank + 1;
  for (int d = 0, j = 0; d < r.rank; ++d)
    r.ext[d] = d == ax ? 1 : s.ext[j++];
  return reshape(x, r);
}

// The slice's gradient is the same slice of x's gradient (tape::make_view_output): the
// operations that consume the slice accumulate into x's gradient in place, so the slice's own
// backward has nothing left to do (an LSTM's four gate slices cost no zero-filled copy and no
// scatter).
// Elements begin, begin + step, ... < end along axis d (step > 0: flip reverses). Negative
// bounds count from the end (-1: the last element), like PyTorch; bounds still outside
// [0, extent] throw index_error (PyTorch's narrow; Python slicing would clamp).
namespace detail {
template <class T>
var<T> slice_var(var<T> const &x, int d0, index_t begin0, index_t end0, index_t step) {
  int const d = detail::normalize_axis("dualcast::slice", d0, x.rank());
  index_t const n = x.dims().ext[d];
  index_t const begin = begin0 < 0 ? begin0 + n : begin0, end = end0 < 0 ? end0 + n : end0;
  tensor<T> y = x.value().slice(d, begin, end, step);
  detail::check_graph_alive("dualcast::slice", x);
  auto sx = x.slot();
  tape *tp = x.owner();
  if (!tp || !sx || !tp->grad_enabled())
    return var<T>(std::move(y), nullptr, tp);
  var<T> r = tp->make_view_output(std::move(y), sx, d, begin, end, step);
  auto slot = r.slot();
  tp->record<T, 1>("slice", {slot}, [w = std::weak_ptr<detail::grad_slot<T>>(slot)] {
    // A kept gradient must not change when x's gradient changes later (a leaf's gradient is
    // added to its earlier value at the end of backward): keep a copy.
    if (auto s = w.lock(); s && s->retain && s->grad.defined())
      s->grad = s->grad->clone();
  });
  return r;
}
} // namespace detail
template <var_like X>
auto slice(X const &x, int d0, index_t begin0, index_t end0, index_t step = 1) {
  return detail::slice_var(detail::as_var(x), d0, begin0, end0, step);
}

// Pieces of x along `axis` (views, PyTorch's split): of `size` elements each (the last one
// smaller when the extent is not a multiple), or of the given sizes (summing to the extent).
template <var_like X> auto split(X const &xin, std::vector<index_t> const &sizes, int axis = 0) {
  using T = typename detail::var_of_t<X>::value_type;
  char const *op = "dualcast::split";
  var<T> const x = detail::as_var(xin);
  int const ax = detail::normalize_axis(op, axis, x.rank());
  index_t total = 0;
  for (index_t n : sizes) {
    if (n < 0)
      throw shape_error(std::string(op) + ": negative size " + std::to_string(n));
    total += n;
  }
  if (total != x.dims().ext[ax])
    throw shape_error(std::string(op) + ": sizes summing to " + std::to_string(total) +
                      " for axis " + std::to_string(ax) + " of shape " + to_string(x.dims()));
  std::vector<var<T>> r;
  index_t at = 0;
  for (index_t n : sizes) {
    r.push_back(slice(x, ax, at, at + n));
    at += n;
  }
  return r;
}
template <var_like X> auto split(X const &x, index_t size, int axis = 0) {
  shape const s = detail::as_var(x).dims();
  int const ax = detail::normalize_axis("dualcast::split", axis, s.rank);
  if (size <= 0)
    throw shape_error("dualcast::split: size " + std::to_string(size) + " is not positive");
  std::vector<index_t> sizes;
  for (index_t at = 0; at < s.ext[ax]; at += size)
    sizes.push_back(at + size <= s.ext[ax] ? size : s.ext[ax] - at);
  // An empty axis gives one empty piece, as torch.split does (callers index the first piece).
  if (sizes.empty())
    sizes.push_back(0);
  return split(x, sizes, ax);
}

namespace detail {
template <class T> var<T> broadcast_to_var(var<T> const &x, shape const &s) {
  return custom_op(
      "broadcast_to", [&](auto const &, auto &, auto const &xv) { return xv.broadcast_to(s); },
      [](auto const &, auto const &, auto &g) { g.add(0, g.out(0)); }, x);
}
} // namespace detail
template <var_like X> auto broadcast_to(X const &x, shape const &s) {
  DUALCAST_REFUSE_FLOAT16("broadcast_to", X);
  return detail::broadcast_to_var(detail::as_var(x), s);
}

// Joins variables along an axis (all other extents equal).
template <class T> var<T> concat(std::vector<var<T>> const &xs, int axis = 0) {
  DUALCAST_REFUSE_FLOAT16("concat", var<T>);
  char const *op = "dualcast::concat";
  if (xs.empty())
    throw shape_error(std::string(op) + ": nothing to concatenate");
  shape s = xs[0].dims();
  int ax = detail::normalize_axis(op, axis, s.rank);
  std::vector<index_t> starts;
  index_t total = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    shape si = xs[i].dims();
    bool ok = si.rank == s.rank;
    for (int d = 0; ok && d < s.rank; ++d)
      ok = d == ax || si.ext[d] == s.ext[d];
    if (!ok)
      throw shape_error(std::string(op) + ": input " + std::to_string(i) + " has shape " +
                        to_string(si) + " but input 0 has shape " + to_string(s) + " (only axis " +
                        std::to_string(ax) + " may differ)");
    starts.push_back(total);
    total += si.ext[ax];
  }
  s.ext[ax] = total;
  return custom_op(
      "concat",
      [&](auto const &, auto &, std::vector<tensor<T>> const &values) {
        tensor<T> y = tensor<T>::empty(s, values[0].dev());
        for (std::size_t i = 0; i < values.size(); ++i)
          y.slice(ax, starts[i], starts[i] + values[i].dims().ext[ax]).assign_raw(values[i]);
        return y;
      },
      [starts, ax](auto const &, auto const &, auto &g) {
        tensor<T> gy = g.out(0);
        for (std::size_t i = 0; i < g.inputs(); ++i)
          if (g.needs(i))
            g.add(i, gy.slice(ax, starts[i], starts[i] + g.input_shape(i).ext[ax]));
      },
      xs);
}

// Stacks variables of one shape along a new axis (numpy stack): n inputs of shape s give one of
// shape s with n inserted at `axis`.
template <class T> var<T> stack(std::vector<var<T>> const &xs, int axis = 0) {
  DUALCAST_REFUSE_FLOAT16("stack", var<T>);
  char const *op = "dualcast::stack";
  if (xs.empty())
    throw shape_error(std::string(op) + ": nothing to stack");
  shape const s = xs[0].dims();
  int ax = detail::normalize_axis(op, axis, s.rank + 1);
  for (std::size_t i = 1; i < xs.size(); ++i)
    if (!(xs[i].dims() == s))
      throw shape_error(std::string(op) + ": input " + std::to_string(i) + " has shape " +
                        to_string(xs[i].dims()) + " but input 0 has shape " + to_string(s));
  shape r;
  r.rank = s.rank + 1;
  for (int d = 0, j = 0; d < r.rank; ++d)
    r.ext[d] = d == ax ? index_t(xs.size()) : s.ext[j++];
  return custom_op(
      "stack",
      [&](auto const &, auto &, std::vector<tensor<T>> const &values) {
        tensor<T> y = tensor<T>::empty(r, values[0].dev());
        for (std::size_t i = 0; i < values.size(); ++i)
          y.select(ax, index_t(i)).assign_raw(values[i]);
        return y;
      },
      [ax](auto const &, auto const &, auto &g) {
        tensor<T> gy = g.out(0);
        for (std::size_t i = 0; i < g.inputs(); ++i)
          if (g.needs(i))
            g.add(i, gy.select(ax, index_t(i)));
      },
      xs);
}

// PyTorch's repeat (NumPy's tile): x repeated reps[d] times along each axis d; x is taken as
// having leading axes of extent 1 when reps is longer than its rank. A broadcast view copied once
// (reshape of it): the gradient sums the copies (broadcast_to's adjoint).
template <var_like X> auto repeat(X const &x, std::vector<index_t> const &reps) {
  DUALCAST_REFUSE_FLOAT16("repeat", X);
  char const *op = "dualcast::repeat";
  shape const s = detail::as_var(x).dims();
  int const r = int(reps.size());
  if (r < s.rank || 2 * r > max_rank)
    throw shape_error(std::string(op) + ": " + std::to_string(r) + " repeats for shape " +
                      to_string(s) + " (at least its rank, at most " +
                      std::to_string(max_rank / 2) + ")");
  shape pairs_one, pairs, out; // (1, e0, 1, e1, ...), (r0, e0, r1, e1, ...), (r0 e0, r1 e1, ...)
  pairs_one.rank = pairs.rank = 2 * r;
  out.rank = r;
  for (int d = 0; d < r; ++d) {
    index_t e = d < r - s.rank ? 1 : s.ext[d - (r - s.rank)];
    if (reps[std::size_t(d)] < 0)
      throw shape_error(std::string(op) + ": negative repeat count " +
                        std::to_string(reps[std::size_t(d)]));
    pairs_one.ext[2 * d] = 1, pairs_one.ext[2 * d + 1] = e;
    pairs.ext[2 * d] = reps[std::size_t(d)], pairs.ext[2 * d + 1] = e;
    out.ext[d] = reps[std::size_t(d)] * e;
  }
  return reshape(broadcast_to(reshape(x, pairs_one), pairs), out);
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE var<T> concat<T>(std::vector<var<T>> const &, int);                         \
  DUALCAST_INSTANTIATE var<T> stack<T>(std::vector<var<T>> const &, int);                          \
  DUALCAST_INSTANTIATE var<T> detail::transpose_var<T>(var<T> const &, int, int);                  \
  DUALCAST_INSTANTIATE var<T> detail::permute_var<T>(var<T> const &, std::vector<int> const &);    \
  DUALCAST_INSTANTIATE var<T> detail::reshape_var<T>(var<T> const &, shape const &);               \
  DUALCAST_INSTANTIATE var<T> detail::broadcast_to_var<T>(var<T> const &, shape const &);          \
  DUALCAST_INSTANTIATE var<T> detail::slice_var<T>(var<T> const &, int, index_t, index_t, index_t);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace dualcast
