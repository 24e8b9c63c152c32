// dualcast/ops/cells.hpp: the ready cells (kernel/cells.hpp) on tape variables, each ONE fused
// node.
//
//   auto gates = dualcast::matmul(x, W) + dualcast::matmul(h, U) + b;   // (B, 4H): i, f, g, o
//   auto [h2, c2] = dualcast::lstm_cell(gates, c);                       // one fused node
//
// Every wrapper takes an optional policy first (tape/policy.hpp: store the partials, or recompute
// them in backward; by default the cost model decides). Arguments may be variables, lazy
// expressions or tensors (constants), as for dualcast::fused. The packed forms slice the gate
// matrix along its last axis (views: no copy, and no scatter of the gradient).
#pragma once

#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/cells.hpp>
#include <dualcast/ops/fused.hpp>
#include <dualcast/ops/shape_ops.hpp>
#include <dualcast/tape/policy.hpp>

#include <array>
#include <string>
#include <type_traits>

namespace dualcast {
namespace detail {
// The k-th of `parts` equal blocks of x's last axis.
template <class X> auto gate_block(char const *op, X const &x, int k, int parts) {
  auto const &v = as_var(x);
  int const last = v.rank() - 1;
  if (last < 0 || v.dims()[last] % parts != 0)
    throw shape_error(std::string(op) + ": the packed gates need a last axis divisible by " +
                      std::to_string(parts) + ", got shape " + to_string(v.dims()));
  index_t const n = v.dims()[last] / parts;
  return slice(v, last, k * n, (k + 1) * n);
}

// The LSTM and GRU cells on variables of float or double (the common call: gates from matmuls,
// the state a variable), one function per element type and policy, so that the compiled
// component (core/compiled.hpp) holds their fused nodes: a program's translation units then do
// not compile the cells' store and recompute passes again. Other arguments (tensors, scalars,
// other element types) take the generic path.
template <class T, class... A>
inline constexpr bool compiled_cell_args_v =
    (std::is_same_v<T, float> || std::is_same_v<T, double>)&&(std::is_same_v<A, var<T>> &&...);

template <class T, policy_kind P>
std::array<var<T>, 2> lstm_cell_vars(var<T> const &i, var<T> const &f, var<T> const &g,
                                     var<T> const &o, var<T> const &c) {
  return dualcast::fused(policy::tag<P>{}, cells::lstm, i, f, g, o, c);
}
template <class T, policy_kind P>
var<T> gru_cell_vars(var<T> const &xr, var<T> const &xz, var<T> const &xn, var<T> const &hr,
                     var<T> const &hz, var<T> const &hn, var<T> const &h) {
  return dualcast::fused(policy::tag<P>{}, cells::gru, xr, xz, xn, hr, hz, hn, h);
}

#define DUALCAST_CELLS(T, P)                                                                       \
  DUALCAST_INSTANTIATE std::array<var<T>, 2> lstm_cell_vars<T, P>(                                 \
      var<T> const &, var<T> const &, var<T> const &, var<T> const &, var<T> const &);             \
  DUALCAST_INSTANTIATE var<T> gru_cell_vars<T, P>(var<T> const &, var<T> const &, var<T> const &,  \
                                                  var<T> const &, var<T> const &, var<T> const &,  \
                                                  var<T> const &);
#define DUALCAST_X(T)                                                                              \
  DUALCAST_CELLS(T, policy_kind::automatic)                                                        \
  DUALCAST_CELLS(T, policy_kind::store) DUALCAST_CELLS(T, policy_kind::recompute)
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
#undef DUALCAST_CELLS
} // namespace detail

// LSTM cell from the four gate pre-activations and the cell state: returns {h', c'}.
template <class P, class I, class F, class G, class O, class C>
requires is_policy_v<P>
auto lstm_cell(P pol, I const &i, F const &f, G const &g, O const &o, C const &c) {
  using T = typename detail::elem_of<C>::type;
  if constexpr (detail::compiled_cell_args_v<T, I, F, G, O, C>)
    return detail::lstm_cell_vars<T, P::kind>(i, f, g, o, c);
  else
    return fused(pol, cells::lstm, i, f, g, o, c);
}
template <class I, class F, class G, class O, class C>
requires(!is_policy_v<I>) auto lstm_cell(I const &i, F const &f, G const &g, O const &o,
                                         C const &c) {
  return lstm_cell(policy::automatic, i, f, g, o, c);
}
// The packed form: gates (..., 4H) in PyTorch's order i, f, g, o, and c (..., H).
template <class P, class Gates, class C>
requires is_policy_v<P>
auto lstm_cell(P pol, Gates const &gates, C const &c) {
  char const *op = "dualcast::lstm_cell";
  return lstm_cell(pol, detail::gate_block(op, gates, 0, 4), detail::gate_block(op, gates, 1, 4),
                   detail::gate_block(op, gates, 2, 4), detail::gate_block(op, gates, 3, 4), c);
}
template <class Gates, class C>
requires(!is_policy_v<Gates>) auto lstm_cell(Gates const &gates, C const &c) {
  return lstm_cell(policy::automatic, gates, c);
}

// GRU cell (PyTorch's formulation, kernel/cells.hpp) from the packed input projection gx (..., 3H:
// r, z, n), the packed hidden projection gh (..., 3H: r, z, n; its bias included) and h: returns
// h'.
template <class P, class GX, class GH, class H>
requires is_policy_v<P>
auto gru_cell(P pol, GX const &gx, GH const &gh, H const &h) {
  char const *op = "dualcast::gru_cell";
  auto const xr = detail::gate_block(op, gx, 0, 3), xz = detail::gate_block(op, gx, 1, 3),
             xn = detail::gate_block(op, gx, 2, 3), hr = detail::gate_block(op, gh, 0, 3),
             hz = detail::gate_block(op, gh, 1, 3), hn = detail::gate_block(op, gh, 2, 3);
  using T = typename decltype(xr)::value_type;
  if constexpr (detail::compiled_cell_args_v<T, H>)
    return detail::gru_cell_vars<T, P::kind>(xr, xz, xn, hr, hz, hn, h);
  else
    return fused(pol, cells::gru, xr, xz, xn, hr, hz, hn, h);
}
template <class GX, class GH, class H>
requires(!is_policy_v<GX>) auto gru_cell(GX const &gx, GH const &gh, H const &h) {
  return gru_cell(policy::automatic, gx, gh, h);
}

// HM-LSTM cell-state update (kernel/cells.hpp): masks z, zb (give them as tensors: constants), the
// cell state c and the gate pre-activations f, i, g: returns c'.
template <class P, class Z, class ZB, class C, class F, class I, class G>
requires is_policy_v<P>
auto hmlstm_update(P pol, Z const &z, ZB const &zb, C const &c, F const &f, I const &i,
                   G const &g) {
  return fused(pol, cells::hmlstm_update, z, zb, c, f, i, g);
}
template <class Z, class ZB, class C, class F, class I, class G>
requires(!is_policy_v<Z>) auto hmlstm_update(Z const &z, ZB const &zb, C const &c, F const &f,
                                             I const &i, G const &g) {
  return fused(cells::hmlstm_update, z, zb, c, f, i, g);
}

// D-LSTM layer-step (kernel/cells.hpp): input x, state (h, s), diagonal weights and biases: {h',
// s'}.
template <class P, class... A>
requires(is_policy_v<P> && sizeof...(A) == 11) auto dlstm_cell(P pol, A const &...a) {
  return fused(pol, cells::dlstm, a...);
}
template <class... A>
requires(sizeof...(A) == 11) auto dlstm_cell(A const &...a) { return fused(cells::dlstm, a...); }

} // namespace dualcast
