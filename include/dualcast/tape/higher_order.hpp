// dualcast/tape/higher_order.hpp: second derivatives of a scalar loss by a tape over duals (forward
// over reverse: the loss recorded on variables of dual<T, K> elements, each carrying K
// directions; backward then gives the gradient and its K directional derivatives, H v, in one
// sweep). docs/higher-order.md lists the operations a tape over duals supports.
//
//   auto f = [](auto const &x) { return dualcast::sum(dualcast::tanh(x * x)); };
//   dualcast::tensor<double> hv = dualcast::hvp(f, x, v);          // H v
//   auto [value, g, hv2] = dualcast::grad_and_hvp(f, x, v);         // f(x), grad f, H v
//   dualcast::tensor<double> H = dualcast::hessian(f, x);           // shape x.dims() ++ x.dims()
//   auto c = dualcast::constant_like(xv, X);   // data X on xv's tape, xv's element type
//
// f takes one variable (var<dual<T, K>>, a fresh tape's leaf) and returns a single-element
// variable or lazy expression; write it generic (auto) so that the same f runs on a plain tape.
// The names elsewhere: torch.autograd.functional.hvp and torch.func.jvp(torch.func.grad(f)) for
// hvp / grad_and_hvp, torch.autograd.functional.hessian and jax.hessian for hessian,
// jax.jvp(jax.grad(f), (x,), (v,)) for grad_and_hvp (JAX's recommended forward over reverse).
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <string>
#include <type_traits>

namespace dualcast {

// What grad_and_hvp returns: the loss, its gradient and the gradient's derivative along v (H v).
template <class T> struct grad_hvp_result {
  T value;
  tensor<T> grad;
  tensor<T> hvp;
};

namespace detail {
// f at x + e v_k for K directions at once: the loss's value and its gradient, as duals (the
// gradient's partial k is H v_k).
template <int K, class F, class T>
std::pair<dual<T, K>, tensor<dual<T, K>>>
dual_gradient(char const *op, F const &f, tensor<T> const &x,
              std::array<tensor<T>, std::size_t(K)> const &dirs) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "dualcast: second derivatives of float or double tensors");
  using D = dual<T, K>;
  if (!x.dev().is_host())
    throw device_error(std::string(op) + ": a tape over duals runs on the host only (x is on " +
                       to_string(x.dev()) + ")");
  tensor<T> const xc = x.contiguous();
  std::array<tensor<T>, std::size_t(K)> dc;
  for (int k = 0; k < K; ++k) {
    if (!(dirs[std::size_t(k)].dims() == x.dims()))
      throw shape_error(std::string(op) + ": the direction has shape " +
                        to_string(dirs[std::size_t(k)].dims()) + " but x has shape " +
                        to_string(x.dims()));
    dc[std::size_t(k)] = dirs[std::size_t(k)].to(device::host()).contiguous();
  }
  auto xd = tensor<D>::empty(x.dims());
  // (pointers and size taken once: through the stores the compiler had recomputed x.size(), a
  // loop over the shape, for every element)
  T const *const xe = xc.data();
  T const *de[K];
  for (int k = 0; k < K; ++k)
    de[k] = dc[std::size_t(k)].data();
  D *const xde = xd.raw_data();
  for (index_t i = 0, n = x.size(); i < n; ++i) {
    D v(xe[i]);
    for (int k = 0; k < K; ++k)
      v.d[k] = de[k][i];
    xde[i] = v;
  }
  tape tp;
  var<D> xv = tp.variable(xd);
  auto y = as_var(f(xv));
  if (y.size() != 1)
    throw shape_error(std::string(op) + ": f must return a single-element variable, not shape " +
                      to_string(y.dims()));
  D const value = y.item();
  if (!y.requires_grad()) // f does not depend on x
    return {value, tensor<D>::zeros(x.dims())};
  tp.backward(y);
  return {value, xv.grad().contiguous()};
}
} // namespace detail

// t, a tensor of plain numbers (the data of a loss), as a constant of x's tape with x's element
// type: t itself on a plain tape, its values with zero partials on a tape over duals. A loss
// written once, generic in its variable, then runs on both tapes, as hvp's f must:
//   auto loss = [&](auto const &w) { return sum(tanh(matmul(constant_like(w, X), w))); };
template <class D, class T> var<D> constant_like(var<D> const &x, tensor<T> const &t) {
  static_assert(std::is_same_v<scalar_of_t<D>, T> && !is_dual_v<T>,
                "dualcast::constant_like: t must hold the plain numbers of x's elements (double "
                "for var<double> and var<dual<double, K>>, float for float ones)");
  tape *const tp = x.owner();
  if (!tp)
    throw tape_error("dualcast::constant_like: x belongs to no tape (a default-constructed "
                     "variable)");
  if constexpr (std::is_same_v<D, T>) {
    return tp->constant(t);
  } else {
    if (!t.dev().is_host())
      throw device_error("dualcast::constant_like: a tape over duals runs on the host only (t is "
                         "on " +
                         to_string(t.dev()) + ")");
    tensor<T> const tc = t.contiguous();
    auto d = tensor<D>::empty(t.dims());
    T const *__restrict v = tc.data();
    D *__restrict y = d.raw_data();
    for (index_t i = 0, n = t.size(); i < n; ++i)
      y[i] = D(v[i]);
    return tp->constant(std::move(d));
  }
}

// f(x), its gradient at x and the gradient's derivative along v, H v (one forward and one
// backward on a tape over duals): jax.jvp(jax.grad(f), (x,), (v,)), torch.func.jvp(grad(f)).
template <class F, class T>
grad_hvp_result<T> grad_and_hvp(F const &f, tensor<T> const &x, tensor<T> const &v) {
  auto const [value, g] = detail::dual_gradient<1>("dualcast::grad_and_hvp", f, x, {v});
  grad_hvp_result<T> r{value.val, tensor<T>::empty(x.dims()), tensor<T>::empty(x.dims())};
  auto const *const ge = g.data();
  T *const gr = r.grad.raw_data(), *const hv = r.hvp.raw_data();
  for (index_t i = 0, n = x.size(); i < n; ++i)
    gr[i] = ge[i].val, hv[i] = ge[i].d[0];
  return r;
}

// The Hessian of f at x times v: torch.autograd.functional.hvp(f, x, v)[1].
template <class F, class T> tensor<T> hvp(F const &f, tensor<T> const &x, tensor<T> const &v) {
  return grad_and_hvp(f, x, v).hvp;
}

// The Hessian of f at x, of shape x.dims() followed by x.dims() (or (n, n) when that rank would
// exceed 8), K columns per backward (n / K sweeps for n elements): for small x. jax.hessian,
// torch.autograd.functional.hessian.
template <int K = 4, class F, class T> tensor<T> hessian(F const &f, tensor<T> const &x) {
  static_assert(K >= 1, "dualcast::hessian: K >= 1 directions per sweep");
  index_t const n = x.size();
  shape hs;
  if (2 * x.rank() <= max_rank) {
    hs = x.dims();
    for (int i = 0; i < x.rank(); ++i)
      hs.ext[hs.rank++] = x.extent(i);
  } else {
    hs = shape{n, n};
  }
  tensor<T> h = tensor<T>::zeros(hs);
  for (index_t j0 = 0; j0 < n; j0 += K) {
    std::array<tensor<T>, std::size_t(K)> dirs;
    for (int k = 0; k < K; ++k) {
      dirs[std::size_t(k)] = tensor<T>::zeros(x.dims());
      if (j0 + k < n)
        dirs[std::size_t(k)].raw_data()[j0 + k] = T(1);
    }
    auto const g = detail::dual_gradient<K>("dualcast::hessian", f, x, dirs).second;
    auto const *const ge = g.data();
    T *const he = h.raw_data();
    for (int k = 0; k < K && j0 + k < n; ++k)
      for (index_t i = 0; i < n; ++i) // column j0 + k (H is symmetric: also row j0 + k)
        he[i * n + j0 + k] = ge[i].d[k];
  }
  return h;
}

} // namespace dualcast
