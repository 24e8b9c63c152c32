// dualcast/ops/shape_ops.hpp: transpose, permute, reshape, slice, concat and broadcast_to on tape
// variables. Transposes, permutations, slices and broadcasts are views (no copy; they share the
// input's storage and version counter); reshape is a view when the input is contiguous. Copies
// (concat, reshape of a non-contiguous input) and the adjoints run on the operand's device.
#pragma once

#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <string>
#include <vector>

namespace dualcast {

template <class T> var<T> transpose(var<T> const &x, int a = 0, int b = 1) {
  auto sx = x.slot();
  return detail::record_op<T>(
      "transpose", x.owner(), x.value().transposed(a, b), bool(sx),
      [sx, a, b](tensor<T> gy) { tape::accumulate_grad(sx, gy.transposed(a, b)); });
}

template <class T> var<T> permute(var<T> const &x, std::vector<int> const &perm) {
  auto sx = x.slot();
  auto inv = detail::inverse_perm(perm);
  return detail::record_op<T>(
      "permute", x.owner(), x.value().permuted(perm), bool(sx),
      [sx, inv](tensor<T> gy) { tape::accumulate_grad(sx, gy.permuted(inv)); });
}

template <class T> var<T> reshape(var<T> const &x, shape const &s) {
  auto sx = x.slot();
  return detail::record_op<T>(
      "reshape", x.owner(), x.value().reshape(s), bool(sx),
      [sx](tensor<T> gy) { tape::accumulate_grad(sx, gy.reshape(sx->dims)); });
}

// The slice's gradient is the same slice of x's gradient (tape::make_view_output): the
// operations that consume the slice accumulate into x's gradient in place, so the slice's own
// backward has nothing left to do (an LSTM's four gate slices cost no zero-filled copy and no
// scatter).
template <class T>
var<T> slice(var<T> const &x, int d, index_t begin, index_t end, index_t step = 1) {
  tensor<T> y = x.value().slice(d, begin, end, step);
  auto sx = x.slot();
  tape *tp = x.owner();
  if (!tp || !sx)
    return var<T>(std::move(y), nullptr, tp);
  var<T> r = tp->make_view_output(std::move(y), sx, [d, begin, end, step](tensor<T> const &g) {
    return g.slice(d, begin, end, step);
  });
  auto slot = r.slot();
  tp->record<T>("slice", {slot}, [w = std::weak_ptr<detail::grad_slot<T>>(slot)] {
    // A kept gradient must not change when x's gradient changes later (a leaf's gradient is
    // added to its earlier value at the end of backward): keep a copy.
    if (auto s = w.lock(); s && s->retain && s->grad.defined())
      s->grad = s->grad.clone();
  });
  return r;
}

template <class T> var<T> broadcast_to(var<T> const &x, shape const &s) {
  auto sx = x.slot();
  return detail::record_op<T>("broadcast_to", x.owner(), x.value().broadcast_to(s), bool(sx),
                              [sx](tensor<T> gy) { tape::accumulate_grad(sx, gy); });
}

// Joins variables along an axis (all other extents equal).
template <class T> var<T> concat(std::vector<var<T>> const &xs, int axis = 0) {
  char const *op = "dualcast::concat";
  if (xs.empty())
    throw shape_error(std::string(op) + ": nothing to concatenate");
  shape s = xs[0].dims();
  int ax = detail::normalize_axis(op, axis, s.rank);
  tape *tp = nullptr;
  bool needs = false;
  index_t total = 0;
  std::vector<std::pair<int, device>> devs;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    devs.emplace_back(int(i), xs[i].value().dev());
    shape si = xs[i].dims();
    bool ok = si.rank == s.rank;
    for (int d = 0; ok && d < s.rank; ++d)
      ok = d == ax || si.ext[d] == s.ext[d];
    if (!ok)
      throw shape_error(std::string(op) + ": input " + std::to_string(i) + " has shape " +
                        to_string(si) + " but input 0 has shape " + to_string(s) + " (only axis " +
                        std::to_string(ax) + " may differ)");
    if (xs[i].owner()) {
      if (tp && tp != xs[i].owner())
        throw tape_error(std::string(op) + ": inputs of different tapes");
      tp = xs[i].owner();
    }
    needs = needs || xs[i].requires_grad();
    total += si.ext[ax];
  }
  s.ext[ax] = total;
  tensor<T> y = tensor<T>::empty(s, detail::common_device(op, devs));
  std::vector<std::shared_ptr<detail::grad_slot<T>>> slots;
  std::vector<index_t> starts;
  index_t at = 0;
  for (auto const &x : xs) {
    y.slice(ax, at, at + x.dims().ext[ax]).assign_raw(x.value());
    slots.push_back(x.slot());
    starts.push_back(at);
    at += x.dims().ext[ax];
  }
  return detail::record_op<T>("concat", tp, y, needs, [slots, starts, ax](tensor<T> gy) {
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (slots[i])
        tape::accumulate_grad(slots[i],
                              gy.slice(ax, starts[i], starts[i] + slots[i]->dims.ext[ax]));
  });
}

} // namespace dualcast
