// dualcast/ops/cast.hpp: conversion between float, double, bfloat16 and half, of tensors and of
// tape variables.
//
//   dualcast::tensor<double> xd = dualcast::cast<double>(xf);   // a new contiguous tensor
//   dualcast::var<float> yf = dualcast::cast<float>(wd);        // on the tape: differentiable
//
// cast<U>(x) with U the element type x already has returns x itself (no copy, shared storage);
// otherwise a new contiguous tensor on x's device holding each element converted (double ->
// float and float -> bfloat16 / half round to nearest even; double -> 16 bits goes through
// float). On tape variables the conversion is a node whose backward converts
// the output's gradient back to the input's element type and adds it into the input's gradient
// (an operation whose output and input have different element types: the node is recorded with
// the output's type and its closure holds the input's gradient slot). Under no_grad, or when x
// requires no gradient, nothing is recorded.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/broadcast/for_each.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <memory>
#include <type_traits>

namespace dualcast {

namespace detail {
template <class U, class T> tensor<U> cast_on(cpu const &host, tensor<T> const &x) {
  return converted<U>(x, host); // (tensor/tensor.hpp)
}
template <class U> constexpr bool cast_target() {
  return std::is_same_v<U, float> || std::is_same_v<U, double> || is_float16_v<U>;
}
} // namespace detail

// x's elements as U (float, double, bfloat16 or half); x itself when it already holds U.
template <class U, class T> tensor<U> cast(tensor<T> const &x) {
  static_assert(detail::plain_operand<tensor<T>>(),
                "dualcast::cast: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  static_assert(detail::cast_target<U>(),
                "dualcast::cast: the target element type is float, double, bfloat16 or half");
  return detail::cast_on<U>(detail::ambient_cpu(), x);
}

// A tape variable's value as U; its gradient flows back converted to T.
template <class U, class T> var<U> cast(var<T> const &x) {
  static_assert(detail::plain_operand<var<T>>(),
                "dualcast::cast: not supported on a tape over duals (dual<T, K> elements) yet; "
                "docs/higher-order.md lists the operations that are");
  static_assert(detail::cast_target<U>(),
                "dualcast::cast: the target element type is float, double, bfloat16 or half");
  if constexpr (std::is_same_v<U, T>) {
    return x;
  } else {
    detail::check_graph_alive("dualcast::cast", x);
    tape *tp = x.owner();
    cpu const host = tp ? tp->ex : detail::ambient_cpu();
    auto const on_stream = detail::tape_stream_scope(tp, x.value().dev());
    tensor<U> y = detail::cast_on<U>(host, x.value());
    if (!tp || !x.requires_grad() || !tp->grad_enabled())
      return var<U>(std::move(y), nullptr, tp);
    var<U> r = tp->make_output(std::move(y), true);
    std::shared_ptr<detail::grad_slot<T>> in = x.slot();
    std::shared_ptr<detail::grad_slot<U>> out = r.slot();
    tp->record<U, 1>("cast", {out}, [in, out, host] {
      detail::accumulate_grad(*in, detail::cast_on<T>(host, detail::out_grad(*out)), host);
    });
    return r;
  }
}

// A lazy expression is materialised first.
template <class U, class E>
requires lazy_expr<E>
auto cast(E const &e) { return cast<U>(e.eval()); }

} // namespace dualcast
