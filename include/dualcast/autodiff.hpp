// dualcast/autodiff.hpp: the reverse-mode tape over whole arrays and all its operations, plus
// the functional forms value_and_grad and grad, and the training essentials: no_grad / detach,
// casts, initialisation, parameter lists, optimizers, printing and .npy / .npz files.
//
//   auto f = [](auto x, auto w) { return dualcast::sum(dualcast::tanh(dualcast::matmul(x, w))); };
//   auto [value, grads] = dualcast::value_and_grad(f)(X, W);   // grads: std::array of tensors
//   auto g = dualcast::grad(f)(X, W);                          // the gradients only
//
// value_and_grad(f)(x...) records f on a fresh tape with every tensor argument a variable,
// runs backward from f's single-element result and returns its value and d f / d x for each
// argument (zeros for arguments f does not depend on).
#pragma once

#include <dualcast/io/npy.hpp>
#include <dualcast/io/npz.hpp>
#include <dualcast/io/print.hpp>
#include <dualcast/nn/init.hpp>
#include <dualcast/nn/loss_scaler.hpp>
#include <dualcast/nn/optim.hpp>
#include <dualcast/nn/parameters.hpp>
#include <dualcast/ops/argmax.hpp>
#include <dualcast/ops/cast.hpp>
#include <dualcast/ops/cells.hpp>
#include <dualcast/ops/conv2d.hpp>
#include <dualcast/ops/elementwise.hpp>
#include <dualcast/ops/indexing.hpp>
#include <dualcast/ops/linalg.hpp>
#include <dualcast/ops/linear_recurrence.hpp>
#include <dualcast/ops/prod.hpp>
#include <dualcast/ops/reduce.hpp>
#include <dualcast/ops/reduce_by_index.hpp>
#include <dualcast/ops/reduce_op.hpp>
#include <dualcast/ops/scan.hpp>
#include <dualcast/ops/scatter.hpp>
#include <dualcast/ops/shape_ops.hpp>
#include <dualcast/ops/softmax.hpp>
#include <dualcast/ops/statistics.hpp>
#include <dualcast/ops/stencil.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/higher_order.hpp>
#include <dualcast/tape/no_grad.hpp>
#include <dualcast/tape/policy.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/memory.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <utility>

namespace dualcast {

template <class F> struct value_and_grad_fn {
  F f;
  template <class T, class... R>
  auto operator()(tensor<T> const &x0, tensor<R> const &...xs) const {
    static_assert((std::is_same_v<T, R> && ...),
                  "dualcast::value_and_grad: arguments of one element type");
    tape tp;
    std::array<var<T>, 1 + sizeof...(R)> v{tp.variable(x0), tp.variable(xs)...};
    var<T> y = std::apply([&](auto const &...a) { return f(a...); }, v);
    std::array<tensor<T>, 1 + sizeof...(R)> g;
    if (y.requires_grad())
      tp.backward(y);
    else if (y.size() != 1)
      throw tape_error("dualcast::value_and_grad: f must return a single-element variable");
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] =
          v[i].grad().defined() ? v[i].grad() : tensor<T>::zeros(v[i].dims(), v[i].value().dev());
    return std::pair<T, std::array<tensor<T>, 1 + sizeof...(R)>>{y.item(), g};
  }
};
template <class F> struct grad_fn {
  F f;
  template <class... X> auto operator()(X const &...x) const {
    return value_and_grad_fn<F>{f}(x...).second;
  }
};

template <class F> value_and_grad_fn<F> value_and_grad(F f) { return {f}; }
template <class F> grad_fn<F> grad(F f) { return {f}; }

} // namespace dualcast
