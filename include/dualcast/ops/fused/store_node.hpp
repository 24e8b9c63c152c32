// dualcast/ops/fused/store_node.hpp: the fused node under policy::store. Forward runs ONE pass
// that writes the values and the diagonal partials P[k, a] = d y_k / d x_a of every variable;
// backward contracts them with the output cotangents, xbar_a += sum_k ybar_k * P[k, a] -- itself
// one fused pass over all inputs when their gradients have the call's shape, else one pass per
// input, summed over its broadcast dimensions afterwards. Memory: one array per kept partial.
#pragma once

#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/numbers/detail/tuple.hpp>
#include <dualcast/ops/fused/core.hpp>
#include <dualcast/tape/detail/grad_slot.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace dualcast::detail {

// y * p, where with Guarded a zero factor wins over an infinite or NaN one (see vjp_op::contract,
// kernel/detail/element_ops.hpp: the store and recompute nodes give the same gradients).
template <bool Guarded, class Y, class P> DUALCAST_HD auto times(Y const &y, P const &p) {
  if constexpr (Guarded)
    return pick((y == Y(0)) || (p == P(0)), Y(0), y * p);
  else
    return y * p;
}
// sum_k y_k * p_k over argument pairs (y0, p0, y1, p1, ...), in a fixed order.
template <bool Guarded, class Y, class P, class... R>
DUALCAST_HD auto contract_pairs(Y const &y, P const &p, R const &...r) {
  if constexpr (sizeof...(R) == 0)
    return times<Guarded>(y, p);
  else
    return times<Guarded>(y, p) + contract_pairs<Guarded>(r...);
}
// Function objects, not lambdas: nvcc runs them on the GPU too.
struct contract_fn {
  template <class... A> DUALCAST_HD auto operator()(A const &...a) const {
    auto r = contract_pairs<false>(a...);
    if (!all_finite(r)) [[unlikely]]
      r = contract_pairs<true>(a...);
    return r;
  }
};
inline constexpr kernel<contract_fn> contract_kernel{contract_fn{}};

// All input cotangents of a store node in one pass, reading each output cotangent once:
//   xbar_a [+]= sum_k ybar_k * P[k, a],  a = 0 .. NA - 1.
// Arguments: ybar_0 .. ybar_{K-1}, then P in k-major order.
template <int K, int NA> struct contract_all_fn {
  template <bool Guarded, std::size_t A, std::size_t... k, class... X>
  DUALCAST_HD static auto term(std::index_sequence<k...>, X const &...x) {
    // the same order of operations as contract_pairs
    return (times<Guarded>(nth<k>(x...), nth<K + k * NA + A>(x...)) + ...);
  }
  template <std::size_t... A, class... X>
  DUALCAST_HD static auto all(std::index_sequence<A...>, X const &...x) {
    auto r = outputs(term<false, A>(std::make_index_sequence<K>{}, x...)...);
    if (!(all_finite(get<A>(r)) && ...)) [[unlikely]]
      r = outputs(term<true, A>(std::make_index_sequence<K>{}, x...)...);
    return r;
  }
  template <class... X> DUALCAST_HD auto operator()(X const &...x) const {
    return all(std::make_index_sequence<NA>{}, x...);
  }
};

// xbar (slot of shape xs) += sum_k ybar_k * P_k over the call shape s.
template <class T, std::size_t K, class Ex, std::size_t... I>
void contract_into(Ex const &ex, grad_slot<T> &slot, shape const &s,
                   std::array<view<T const>, 2 * K> const &v, std::index_sequence<I...>) {
  if (slot.dims == s) {
    auto [g, acc] = grad_target(slot);
    auto o = out(g.raw_view());
    o.add[0] = acc;
    apply(ex, contract_kernel, o, v[I]...);
  } else {
    tensor<T> tmp = tensor<T>::empty(s, slot.dev);
    apply(ex, contract_kernel, out(tmp.raw_view()), v[I]...);
    auto [g, acc] = grad_target(slot);
    backend_reduce(hook{}, ex, s, static_cast<T const *>(tmp.data()), g.raw_view(), acc);
  }
}

// The backward of a store node when every input has a gradient of the call's shape (no
// broadcast, no repeated variable, no two sharing elements): all cotangents in one pass
// (contract_all_fn), each overwritten where fresh and added to elsewhere. false: not applicable --
// the caller contracts input by input (the gradients are then defined, zeroed where they were
// fresh).
template <class T, int K, int NA, class Ex, std::size_t... a, std::size_t... k, std::size_t... p>
bool contract_all(Ex const &ex, fused_core<T> const &c, std::vector<tensor<T>> const &ybar,
                  std::index_sequence<a...>, std::index_sequence<k...>, std::index_sequence<p...>) {
  auto const &slots = c.in;
  auto const &s = c.s;
  for (int i = 0; i < NA; ++i) {
    auto const &sl = slots[std::size_t(i)];
    if (!sl || !(sl->dims == s))
      return false;
    for (int j = 0; j < i; ++j)
      if (slots[std::size_t(j)] == sl)
        return false;
  }
  std::array<tensor<T>, NA> g;
  std::array<bool, NA> acc{};
  for (int i = 0; i < NA; ++i)
    std::tie(g[std::size_t(i)], acc[std::size_t(i)]) = grad_target(*slots[std::size_t(i)]);
  bool overlap = false; // slices of one variable that share elements
  for (int i = 0; i < NA; ++i)
    for (int j = 0; j < i; ++j)
      overlap = overlap || overlaps(g[std::size_t(i)].cview(), g[std::size_t(j)].cview());
  if (overlap) {
    for (int i = 0; i < NA; ++i)
      if (!acc[std::size_t(i)])
        g[std::size_t(i)].assign_raw(tensor<T>::zeros(shape{}, g[std::size_t(i)].dev()));
    return false;
  }
  auto o = out(g[a].raw_view()...);
  o.add = acc;
  apply(ex, kernel<contract_all_fn<K, NA>>{{}}, o, ybar[k].cview()...,
        view<T const>(partial_at(c, p / std::size_t(NA), p % std::size_t(NA)))...);
  return true;
}

// The identity, as a kernel whose output is added to (merge_repeated: p_first += p_later).
struct pass_fn {
  template <class X> DUALCAST_HD X operator()(X const &x) const { return x; }
};

// A store node whose variable is passed more than once (x * x): the later uses' partials (in
// `all`, output-major, K * NA of them) added into the first use's, the one kept (kept_partial).
// One partial array per distinct variable: the same memory as a node with the leaf
// deduplicated; its gradient then contracts the sum of the partials.
template <class T, class Ex>
void merge_repeated(Ex const &ex, fused_core<T> const &c, view<T> const *all, std::size_t K) {
  std::size_t const na = c.in.size();
  for (std::size_t a = 0; a < na; ++a) {
    if (!c.in[a] || kept_partial(c, a))
      continue;
    for (std::size_t k = 0; k < K; ++k) {
      auto o = out(partial_at(c, k, first_use(c, a)));
      o.add[0] = true;
      apply(ex, kernel<pass_fn>{{}}, o, view<T const>(all[k * na + a]));
    }
  }
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE void merge_repeated<T, cpu>(cpu const &, fused_core<T> const &,             \
                                                   view<T> const *, std::size_t);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

// Forward and recording of a store node: `ins` are the kernel's array arguments (views),
// `scalars` its scalar table (Layout: where each argument comes from), `outs` the output values,
// `core` the node's state (its partials: alloc_partials).
template <class T, int K, class Active, class Layout, class Ex, class F, bool S, std::size_t N,
          class Scalars>
void store_node(Ex const &ex, tape &tp, kernel<F, S> const &k, array_args<T, N> const &ins,
                Scalars const &scalars, std::array<tensor<T>, K> const &outs,
                std::array<slot_ptr<T>, K> out_slots, fused_core<T> &&core) {
  constexpr int NA = Active::count;
  std::array<view<T>, std::size_t(K + K * NA)> all;
  for (int i = 0; i < K; ++i)
    all[std::size_t(i)] = outs[std::size_t(i)].raw_view();
  arena_array<saved_tensor> saves;
  tensor<T> const dropped = alloc_partials(tp.node_memory(), core, saves, K, all.data() + K);
  apply_arrays<partials_op<F, Layout, K, Active>, S>(
      ex, partials_op<F, Layout, K, Active>{{k.f, scalars}}, ins, all,
      std::array<bool, std::size_t(K + K * NA)>{}, K, "partial");
  if constexpr (NA > 1)
    merge_repeated<T>(ex, core, all.data() + K, std::size_t(K));
  tp.record_static<T, K>(
      "fused elementwise (store)", out_slots,
      [ex, c = std::move(core)](std::array<slot_ptr<T>, K> const &os) {
        fused_backward<T> const b(c, {os.data(), os.size()});
        gather_ybar(*b);
        bool done = false;
        if constexpr (NA > 1)
          done = contract_all<T, K, NA>(ex, c, b->ybar, std::make_index_sequence<std::size_t(NA)>{},
                                        std::make_index_sequence<std::size_t(K)>{},
                                        std::make_index_sequence<std::size_t(K * NA)>{});
        for (int a2 = 0; a2 < NA && !done; ++a2) {
          if (!kept_partial(c, std::size_t(a2))) // (a repeated variable's: in its first use's)
            continue;
          std::array<view<T const>, 2 * std::size_t(K)> v;
          for (int k2 = 0; k2 < K; ++k2) {
            v[std::size_t(2 * k2)] = b->ybar[std::size_t(k2)].cview();
            v[std::size_t(2 * k2 + 1)] = partial_at(c, std::size_t(k2), std::size_t(a2));
          }
          contract_into<T, K>(ex, *c.in[std::size_t(a2)], c.s, v,
                              std::make_index_sequence<2 * std::size_t(K)>{});
        }
      },
      std::move(saves));
}

} // namespace dualcast::detail
