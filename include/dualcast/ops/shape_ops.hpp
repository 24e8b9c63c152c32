// dualcast/ops/shape_ops.hpp: transpose, permute, reshape, slice, concat and broadcast_to on tape
// variables. Transposes, permutations, slices and broadcasts are views (no copy; they share the
// input's storage and version counter); reshape is a view when the input is contiguous. Copies
// (concat, reshape of a non-contiguous input) and the adjoints run on the operand's device.
#pragma once

#include <dualcast/custom_op.hpp>
#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <memory>
#include <string>
#include <vector>

namespace dualcast {

template <var_like X> auto transpose(X const &x, int a = 0, int b = 1) {
  return custom_op(
      "transpose", [&](auto const &, auto &, auto const &xv) { return xv.transposed(a, b); },
      [a, b](auto const &, auto const &, auto &g) { g.add(0, g.out(0).transposed(a, b)); }, x);
}

template <var_like X> auto permute(X const &x, std::vector<int> const &perm) {
  auto inv = detail::inverse_perm(perm);
  return custom_op(
      "permute", [&](auto const &, auto &, auto const &xv) { return xv.permuted(perm); },
      [inv](auto const &, auto const &, auto &g) { g.add(0, g.out(0).permuted(inv)); }, x);
}

template <var_like X> auto reshape(X const &x, shape const &s) {
  shape const from = detail::as_var(x).dims();
  return custom_op(
      "reshape", [&](auto const &, auto &, auto const &xv) { return xv.reshape(s); },
      [from](auto const &, auto const &, auto &g) { g.add(0, g.out(0).reshape(from)); }, x);
}

// The slice's gradient is the same slice of x's gradient (tape::make_view_output): the
// operations that consume the slice accumulate into x's gradient in place, so the slice's own
// backward has nothing left to do (an LSTM's four gate slices cost no zero-filled copy and no
// scatter).
template <var_like X>
auto slice(X const &xin, int d, index_t begin, index_t end, index_t step = 1) {
  auto const &x = detail::as_var(xin);
  using T = typename detail::var_of_t<X>::value_type;
  tensor<T> y = x.value().slice(d, begin, end, step);
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
      s->grad = s->grad.clone();
  });
  return r;
}

template <var_like X> auto broadcast_to(X const &x, shape const &s) {
  return custom_op(
      "broadcast_to", [&](auto const &, auto &, auto const &xv) { return xv.broadcast_to(s); },
      [](auto const &, auto const &, auto &g) { g.add(0, g.out(0)); }, x);
}

// Joins variables along an axis (all other extents equal).
template <class T> var<T> concat(std::vector<var<T>> const &xs, int axis = 0) {
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

} // namespace dualcast
