// dualcast/ops/fused/dual_node.hpp: the fused elementwise node on a tape over duals (forward over
// reverse: variables of dual<T, K> elements, docs/higher-order.md).
//
// The node is the fused node of the plain tape with one more level of nesting, run as the plain
// tape's SIMD passes on the parts (value, partial k) of the dual arrays. Forward: the values are
// the kernel run by `apply` on the values' parts (the plain tape's pass, so the values have its
// bits: the store node's values-and-partials pass where the plain node of the call stores its
// partials, which are then kept for backward; else its values pass); the tangents are tangent_fn --
// the kernel on dual<X, K> numbers whose K partials are the inputs' tangent parts, passed as K more
// arrays per input -- run by the same `apply`. Backward: x_a's cotangent is
// sum_o ybar_o * d y_o / d x_a in dual arithmetic, tangent k:
//   sum_o ybar_o.d[k] * d y_o / d x_a + ybar_o.val * d (y_o.d[k]) / d x_a
// (the Hessian-vector product's term): the VJP of tangent_fn on direction k's tangents (outputs
// y_o and y_o.d[k]; the variables active, so d (y_o.d[k]) / d x_a are second derivatives along
// the tangent) with output cotangents ybar_o.d[k] and ybar_o.val, one backend pass per direction
// that contracts in registers. The values of those cotangents are the plain store node's
// (plain_cotangent_values), so that the gradient's values have the plain tape's bits.
#pragma once

#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/broadcast/detail/call_checks.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/fused/args.hpp>
#include <dualcast/ops/fused/cost_model.hpp>
#include <dualcast/ops/fused/store_node.hpp>
#include <dualcast/ops/fused/strided_pass.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/dual_elements.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast::detail {

template <class A> inline constexpr bool is_array_arg_v = is_var_v<A> || is_tensor_v<A>;

// Where argument p of a call on A... lives: its index among the arrays (variables and tensors),
// or -1 for a scalar; and its index among the variables (-1 for others).
template <class... A> struct dual_call_plan {
  static constexpr std::size_t n = sizeof...(A);
  static constexpr auto array_index = [] {
    std::array<int, n + 1> r{};
    bool const is[] = {is_array_arg_v<A>..., false};
    int k = 0;
    for (std::size_t i = 0; i < n; ++i)
      r[i] = is[i] ? k++ : -1;
    return r;
  }();
  static constexpr auto var_index = [] {
    std::array<int, n + 1> r{};
    bool const is[] = {is_var_v<A>..., false};
    int k = 0;
    for (std::size_t i = 0; i < n; ++i)
      r[i] = is[i] ? k++ : -1;
    return r;
  }();
  static constexpr int arrays = (0 + ... + (is_array_arg_v<A> ? 1 : 0));
  static constexpr int vars = (0 + ... + (is_var_v<A> ? 1 : 0));
  // Variable a's index among the arrays.
  static constexpr auto var_array = [] {
    std::array<int, std::size_t(vars > 0 ? vars : 1)> r{};
    for (std::size_t u = 0; u < n; ++u)
      if (var_index[u] >= 0)
        r[std::size_t(var_index[u])] = array_index[u];
    return r;
  }();
};

// The bytes t's elements occupy (view_overlap.hpp's range_of), without a view for a contiguous t.
template <class T> extent_range tensor_range(tensor<T> const &t) {
  if (t.size() == 0)
    return {0, 0};
  if (!t.is_contiguous())
    return range_of(t.cview());
  flat_interval const r = flat_interval_of(t.data(), t.size());
  return {r.lo, r.hi};
}

// A scalar argument as the kernel sees it (the real type R); arrays hold nothing here.
struct no_scalar {};
template <class R, class A> auto scalar_slot(A const &a) {
  if constexpr (is_array_arg_v<A>)
    return no_scalar{};
  else
    return R(a);
}

template <class D, class P, class... A> struct dual_fused_call {
  using R = real_part_t<D>;
  static constexpr int NA = P::vars;
  static constexpr int NX = P::arrays;
  using scalars = std::tuple<decltype(scalar_slot<R>(std::declval<A const &>()))...>;

  // The values of the input cotangents (their real parts) as the plain tape's node of the call
  // computes them, so that they have its bits. Written into dst[i] (the value part of array i's
  // fresh gradient, in its own dims; added to where add[i]) for each variable array whose dst is
  // given. A recompute node (no `stored` partials): its VJP pass, vjp_arrays
  // (ops/fused/recompute_node.hpp). A store node (stored: the partials forward kept, NO * NA rows
  // of n = s.size(), row o * NA + a, fused_duals): the partials d y_k / d x_a contracted with the
  // cotangents' values gyv by its contraction kernel, summed over broadcast dimensions by the
  // backend's reduction; when every such array has the call's shape s, all of them in ONE
  // contraction pass (contract_all_fn: the same order of operations as contract_kernel, so the
  // same bits) instead of one per variable. scratch: contiguous arrays of n elements,
  // NO * (1 + NA) + 1 + NA of them.
  template <std::size_t NO, bool S, class Ex, class F, class Seq, std::size_t NX_>
  static void plain_cotangent_values(Ex const &ex, F const &f, scalars const &sc, Seq seq,
                                     std::array<view<R const>, NX_> const &vals,
                                     std::array<view<R const>, NO> const &gyv, shape const &s,
                                     std::array<view<R>, NX_> const &dst,
                                     std::array<bool, NX_> const &add, R *scratch, R *stored) {
    index_t const n = s.size();
    auto row = [&](std::size_t r) { return view<R>(scratch + index_t(r) * n, s); };
    if (!stored) {
      [&]<std::size_t... p>(std::index_sequence<p...>) {
        auto arg = [&]<std::size_t u>(std::integral_constant<std::size_t, u>) {
          if constexpr (P::array_index[u] >= 0)
            return vals[std::size_t(P::array_index[u])];
          else
            return std::get<u>(sc);
        };
        using Layout = call_layout<decltype(arg(std::integral_constant<std::size_t, p>{}))...>;
        array_args<R, NX_> ins;
        for (std::size_t i = 0; i < NX_; ++i)
          ins.views[i] = vals[i], ins.pos[i] = Layout::array_positions[i];
        // (a gradient not needed: a scratch row of its array's shape each)
        std::size_t const spare = NO * (1 + std::size_t(NA)) + 1;
        std::array<view<R>, std::size_t(NA)> xv;
        bool xadd[NA > 0 ? NA : 1] = {};
        for (int a = 0; a < NA; ++a) {
          std::size_t const i = std::size_t(P::var_array[std::size_t(a)]);
          view<R> const &d = dst[i];
          xv[std::size_t(a)] =
              d.data() ? d : view<R>(scratch + index_t(spare + std::size_t(a)) * n, vals[i].dims());
          xadd[a] = d.data() && add[i];
        }
        vjp_arrays<S, F, Layout, int(NO), active_of<A...>>(
            ex, kernel<F, S>{f}, ins,
            scalar_table<F>(arg(std::integral_constant<std::size_t, p>{})...), xv, xadd, gyv);
      }
      (seq);
      return;
    }
    std::array<view<R>, NO * std::size_t(NA)> pv;
    for (std::size_t q = 0; q < pv.size(); ++q)
      pv[q] = view<R>(stored + index_t(q) * n, s);
    std::size_t const spare = NO * (1 + std::size_t(NA)); // a row for an unneeded output
    // Whether all the needed gradients have the call's shape.
    constexpr auto const &arr = P::var_array;
    bool one_pass = true;
    for (int a = 0; a < NA; ++a) {
      std::size_t const i = std::size_t(arr[std::size_t(a)]);
      if (dst[i].data() && !(dst[i].dims() == s))
        one_pass = false;
    }
    if (one_pass) {
      std::array<view<R>, std::size_t(NA)> c;
      std::array<bool, std::size_t(NA)> c_add{};
      for (int a = 0; a < NA; ++a) {
        std::size_t const i = std::size_t(arr[std::size_t(a)]);
        c[std::size_t(a)] = dst[i].data() ? dst[i] : row(spare);
        c_add[std::size_t(a)] = dst[i].data() && add[i];
      }
      [&]<std::size_t... a, std::size_t... o, std::size_t... q>(
          std::index_sequence<a...>, std::index_sequence<o...>, std::index_sequence<q...>) {
        auto targets = out(c[a]...);
        targets.add = c_add;
        apply_fresh(ex, kernel<contract_all_fn<int(NO), NA>>{{}}, targets, gyv[o]...,
                    view<R const>(pv[q])...);
      }
      (std::make_index_sequence<std::size_t(NA)>{}, std::make_index_sequence<NO>{},
       std::make_index_sequence<NO * std::size_t(NA)>{});
      return;
    }
    for (int a = 0; a < NA; ++a) {
      std::size_t const i = std::size_t(arr[std::size_t(a)]);
      view<R> const &d = dst[i];
      if (!d.data())
        continue;
      bool const same = d.dims() == s;
      auto c = out(same ? d : row(spare));
      c.add[0] = same && add[i];
      [&]<std::size_t... k>(std::index_sequence<k...>) {
        apply_fresh(ex, contract_kernel, c,
                    (k % 2 == 0
                         ? gyv[k / 2]
                         : view<R const>(pv[(k / 2) * std::size_t(NA) + std::size_t(a)]))...);
      }
      (std::make_index_sequence<2 * NO>{});
      if (!same)
        backend_reduce(hook{}, ex, s, static_cast<R const *>(std::get<0>(c.items).data()), d,
                       add[i]);
    }
  }
};

// The first dual type among X (void when none).
template <class... X> struct first_dual { using type = void; };
template <class X, class... Y> struct first_dual<X, Y...> {
  using type = std::conditional_t<is_dual_v<X>, X, typename first_dual<Y...>::type>;
};

// The kernel whose outputs are f's outputs' tangents (and, with Values, first their values) when
// each array argument carries K tangents, passed after f's own arguments (tangent k of array i at
// position P::n + k * NX + i): f run on dual<W, K> numbers, W the first dual type the backend
// passes (an active argument's, when it takes partials -- a chunk of the variables at a time) or
// else the first array's (a batch or a number), so that every lifted array has one type. The
// backend's SIMD passes then take the tangent parts and, with the arrays active, their
// derivatives.
template <class F, class P, int K, bool Values> struct tangent_fn {
  F f;
  // (static: clang 14 captures no constexpr local in the generic lambdas below)
  static constexpr std::size_t n = P::n;
  static constexpr int NX = P::arrays;
  template <std::size_t... q> static constexpr int first_array(std::index_sequence<q...>) {
    int r = -1;
    ((r = (r < 0 && P::array_index[q] >= 0) ? int(q) : r), ...);
    return r;
  }
  template <class... X> auto operator()(X const &...x) const {
    constexpr int w = first_array(std::make_index_sequence<n>{});
    static_assert(w >= 0, "dualcast: a fused node on duals has an array argument");
    using W = std::conditional_t<std::is_void_v<typename first_dual<X...>::type>,
                                 std::decay_t<decltype(nth<std::size_t(w)>(x...))>,
                                 typename first_dual<X...>::type>;
    if constexpr (is_dual_v<W>)
      return chunk_outside<W>(x...);
    else
      return tangents_outside<W>(x...);
  }
  // Without active arguments (the forward's tangent pass): f on dual<W, K>.
  template <class W, class... X> auto tangents_outside(X const &...x) const {
    using L = dual<W, K>;
    auto lift = [&]<std::size_t q>(std::integral_constant<std::size_t, q>) {
      if constexpr (P::array_index[q] >= 0) {
        L d(W(nth<q>(x...)));
        [&]<std::size_t... k>(std::index_sequence<k...>) {
          ((d.d[k] = W(nth<n + k * std::size_t(NX) + std::size_t(P::array_index[q])>(x...))), ...);
        }
        (std::make_index_sequence<std::size_t(K)>{});
        return d;
      } else {
        return nth<q>(x...);
      }
    };
    return lifted_outputs<L>(
        lift, [](L const &y) { return y.val; }, [](L const &y, std::size_t k) { return y.d[k]; });
  }
  // With active arguments (W = dual<B, C>: a chunk of C partials from the backend): f on
  // dual<dual<B, K>, C>, the chunk's partials outside and the K tangents inside, so that every
  // step's inner numbers (K + 1 batches) stay in registers; nested the other way round,
  // dual<dual<B, C>, K>, each step moved whole dual<B, C> temporaries through memory (memset and
  // memcpy calls: a seventh of the D-LSTM's H v). The results are put back as W: output o's
  // value (y.val.val, y.d[i].val), its tangent k (y.val.d[k], y.d[i].d[k]).
  template <class W, class... X> auto chunk_outside(X const &...x) const {
    using B = typename W::value_type;
    static constexpr int C = W::size;
    using I = dual<B, K>;
    using L = dual<I, C>;
    auto lift = [&]<std::size_t q>(std::integral_constant<std::size_t, q>) {
      if constexpr (P::array_index[q] >= 0) {
        auto const &xq = nth<q>(x...);
        L d;
        if constexpr (std::is_same_v<std::decay_t<decltype(xq)>, W>) {
          d.val.val = xq.val;
          for (int i = 0; i < C; ++i)
            d.d[i].val = xq.d[i];
        } else {
          d.val.val = B(xq);
        }
        [&]<std::size_t... k>(std::index_sequence<k...>) {
          ((d.val.d[k] = B(nth<n + k * std::size_t(NX) + std::size_t(P::array_index[q])>(x...))),
           ...);
        }
        (std::make_index_sequence<std::size_t(K)>{});
        return d;
      } else {
        return nth<q>(x...);
      }
    };
    auto value = [](L const &y) {
      W w;
      w.val = y.val.val;
      for (int i = 0; i < C; ++i)
        w.d[i] = y.d[i].val;
      return w;
    };
    auto tangent = [](L const &y, std::size_t k) {
      W w;
      w.val = y.val.d[k];
      for (int i = 0; i < C; ++i)
        w.d[i] = y.d[i].d[k];
      return w;
    };
    return lifted_outputs<L>(lift, value, tangent);
  }
  // f on the lifted arguments (lift(q): argument q, an array's as L), its results as the kernel's
  // outputs: with Values first each output's value, then tangent k of output o. value(y) and
  // tangent(y, k) read them from a result of type L; a result of another type depends on no array
  // (a constant: its tangents zero).
  template <class L, class Lift, class Value, class Tangent>
  auto lifted_outputs(Lift const &lift, Value const &value, Tangent const &tangent) const {
    auto r = [&]<std::size_t... p>(std::index_sequence<p...>) {
      return as_outputs(f(lift(std::integral_constant<std::size_t, p>{})...));
    }
    (std::make_index_sequence<n>{});
    using RO = std::decay_t<decltype(r)>;
    // Output j of the result: a value (j < RO::size with Values), else tangent k of output o.
    auto part = [&]<std::size_t j>(std::integral_constant<std::size_t, j>) {
      constexpr std::size_t v = Values ? RO::size : 0;
      constexpr std::size_t o = j < v ? j : (j - v) / std::size_t(K);
      auto const &y = get<o>(r);
      using Y = std::decay_t<decltype(y)>;
      if constexpr (std::is_same_v<Y, L>) {
        if constexpr (j < v)
          return value(y);
        else
          return tangent(y, (j - v) % std::size_t(K));
      } else if constexpr (j < v) {
        return y; // an output that depends on no array: a constant
      } else {
        return Y(0);
      }
    };
    return [&]<std::size_t... j>(std::index_sequence<j...>) {
      return outputs(part(std::integral_constant<std::size_t, j>{})...);
    }
    (std::make_index_sequence<(Values ? RO::size : 0) + RO::size * std::size_t(K)>{});
  }
};

// The active set of the backward's tangent passes (the VJP of tangent_fn): all the variables in
// ONE evaluation where they are at most max_sparse_chunk, not in chunks of the set's own size,
// each of which evaluated the values, tangents and their transcendentals again (the D-LSTM cell's
// eleven variables: 8 + 3). Its nested duals, dual<dual<., K>, NA>, cost registers either way.
template <int C, int... I> active_set<C, I...> rechunked(active_set<default_chunk, I...>);
template <class Active>
using one_evaluation_t =
    decltype(rechunked<(Active::count > Active::chunk && Active::count <= max_sparse_chunk
                            ? Active::count
                            : Active::chunk)>(Active{}));

// The fused node's passes when it is flat: every array argument, output, output cotangent and
// gradient target a contiguous array of the call's shape, so that each part of a dual array (its
// values; its tangent k) is every (K + 1)-th number from its first (x[i]: array i's first number).
// The passes are the view-based ones' below (the same operations, kernels and order: the same
// bits), run on those runs by strided_pass without a view per part.
template <class D, class P, class... A> struct dual_flat_passes {
  using R = real_part_t<D>;
  using C = dual_fused_call<D, P, A...>;
  using scalars = typename C::scalars;
  using Active = active_of<A...>;
  static constexpr int K = D::size, NX = P::arrays, NA = P::vars;
  static constexpr index_t w = K + 1;
  using base_layout = call_layout<std::conditional_t<is_array_arg_v<A>, view<R const>, R>...>;
  template <std::size_t E> using layout_plus = typename layout_with_views<base_layout, R, E>::type;

  // The scalar table of a pass on the call's arguments followed by E more arrays (layout L).
  template <class L, std::size_t E> static typename L::scalars table(scalars const &sc) {
    auto slot = [&]<std::size_t q>(std::integral_constant<std::size_t, q>) {
      if constexpr (P::array_index[q] >= 0)
        return array_marker{};
      else
        return std::get<q>(sc);
    };
    return [&]<std::size_t... p, std::size_t... e>(std::index_sequence<p...>,
                                                   std::index_sequence<e...>) {
      return layout_scalars<L>(slot(std::integral_constant<std::size_t, p>{})...,
                               (void(e), array_marker{})...);
    }
    (std::index_sequence_for<A...>{}, std::make_index_sequence<E>{});
  }
  static std::array<strided<R const>, std::size_t(NX)> values(std::array<R const *, NX> const &x) {
    std::array<strided<R const>, std::size_t(NX)> v;
    for (std::size_t i = 0; i < std::size_t(NX); ++i)
      v[i] = {x[i], w};
    return v;
  }

  // Forward: output o's values (from y[o], fresh) by the kernel -- with its partials into the
  // rows of `partials` where given (the store node's pass) -- then its tangents by tangent_fn.
  template <bool S, std::size_t NO, class Ex, class F>
  static void forward(Ex const &ex, F const &f, scalars const &sc,
                      std::array<R const *, NX> const &x, std::array<R *, NO> const &y, R *partials,
                      index_t n) {
    auto const vals = values(x);
    if constexpr (NA > 0) {
      if (partials) {
        constexpr std::size_t NP = NO * std::size_t(NA);
        std::array<strided<R>, NO + NP> outs;
        for (std::size_t o = 0; o < NO; ++o)
          outs[o] = {y[o], w};
        for (std::size_t q = 0; q < NP; ++q)
          outs[NO + q] = {partials + index_t(q) * n, 1};
        partials_op<F, base_layout, int(NO), Active> op{{f, table<base_layout, 0>(sc)}};
        strided_pass<S, R>(ex, op, vals, outs, std::array<bool, NO + NP>{}, n);
      }
    }
    if (!partials) {
      std::array<strided<R>, NO> outs;
      for (std::size_t o = 0; o < NO; ++o)
        outs[o] = {y[o], w};
      values_op<F, base_layout, int(NO)> op{{f, table<base_layout, 0>(sc)}};
      strided_pass<S, R>(ex, op, vals, outs, std::array<bool, NO>{}, n);
    }
    constexpr std::size_t NT = std::size_t(NX * K);
    std::array<strided<R const>, std::size_t(NX) + NT> in;
    for (std::size_t i = 0; i < std::size_t(NX); ++i) {
      in[i] = vals[i];
      for (int k = 0; k < K; ++k)
        in[std::size_t(NX + k * NX) + i] = {x[i] + 1 + k, w};
    }
    std::array<strided<R>, NO * std::size_t(K)> outs;
    for (std::size_t j = 0; j < outs.size(); ++j)
      outs[j] = {y[j / std::size_t(K)] + 1 + index_t(j % std::size_t(K)), w};
    using TL = layout_plus<NT>;
    values_op<tangent_fn<F, P, K, false>, TL, int(NO * std::size_t(K))> op{
        {{f}, table<TL, NT>(sc)}};
    strided_pass<S, R>(ex, op, in, outs, std::array<bool, NO * std::size_t(K)>{}, n);
  }

  // Backward: gx[i] array i's gradient target (its first number; null: not needed), added to where
  // acc[i]; gy[o] output o's cotangent. The values of the input cotangents as the plain tape's
  // node of the call computes them, so with its bits: the store node's contraction of the
  // partials forward kept (`stored`, output-major rows) with the cotangents' values, in one pass;
  // else the recompute node's VJP pass. Then tangent k of each by the VJP of tangent_fn on
  // direction k. scratch: a row of n for the outputs of gradients not needed.
  template <bool S, std::size_t NO, class Ex, class F>
  static void backward(Ex const &ex, F const &f, scalars const &sc,
                       std::array<R const *, NX> const &x, std::array<R const *, NO> const &gy,
                       std::array<R *, NX> const &gx, std::array<bool, NX> const &acc, R *scratch,
                       R const *stored, index_t n) {
    if constexpr (NA > 0) {
      auto const vals = values(x);
      constexpr auto const &arr = P::var_array;
      // The needed gradients' part c (0: the values, 1 + k: tangent k), the others the scratch row.
      std::array<bool, std::size_t(NA)> add{};
      auto targets = [&](int c) {
        std::array<strided<R>, std::size_t(NA)> t;
        for (std::size_t a = 0; a < std::size_t(NA); ++a) {
          std::size_t const i = std::size_t(arr[a]);
          t[a] = gx[i] ? strided<R>{gx[i] + c, w} : strided<R>{scratch, 1};
          add[a] = gx[i] && acc[i];
        }
        return t;
      };
      if (stored) {
        constexpr std::size_t NP = NO * std::size_t(NA);
        using CL = typename layout_with_views<arg_layout<>, R, NO + NP>::type;
        std::array<strided<R const>, NO + NP> in;
        for (std::size_t o = 0; o < NO; ++o)
          in[o] = {gy[o], w};
        for (std::size_t q = 0; q < NP; ++q)
          in[NO + q] = {stored + index_t(q) * n, 1};
        auto const markers = [&]<std::size_t... e>(std::index_sequence<e...>) {
          return layout_scalars<CL>((void(e), array_marker{})...);
        }
        (std::make_index_sequence<NO + NP>{});
        values_op<contract_all_fn<int(NO), NA>, CL, NA> op{{{}, markers}};
        auto const out = targets(0);
        strided_pass<true, R>(ex, op, in, out, add, n);
      } else {
        std::array<strided<R const>, std::size_t(NX) + NO> in;
        for (std::size_t i = 0; i < std::size_t(NX); ++i)
          in[i] = vals[i];
        for (std::size_t o = 0; o < NO; ++o)
          in[std::size_t(NX) + o] = {gy[o], w};
        vjp_op<F, base_layout, int(NO), Active> op{{f, table<base_layout, 0>(sc)}};
        auto const out = targets(0);
        strided_pass<S, R>(ex, op, in, out, add, n);
      }
      using TF = tangent_fn<F, P, 1, true>;
      using VL = layout_plus<std::size_t(NX)>;
      vjp_op<TF, VL, int(2 * NO), one_evaluation_t<Active>> const op{
          {TF{f}, table<VL, std::size_t(NX)>(sc)}};
      for (int k = 0; k < K; ++k) {
        std::array<strided<R const>, std::size_t(2 * NX) + 2 * NO> in;
        for (std::size_t i = 0; i < std::size_t(NX); ++i)
          in[i] = vals[i], in[std::size_t(NX) + i] = {x[i] + 1 + k, w};
        for (std::size_t o = 0; o < NO; ++o)
          in[std::size_t(2 * NX) + o] = {gy[o] + 1 + k, w},
                                   in[std::size_t(2 * NX) + NO + o] = {gy[o], w};
        auto const out = targets(1 + k);
        strided_pass<S, R>(ex, op, in, out, add, n);
      }
    } else {
      (void)ex, (void)f, (void)sc, (void)x, (void)gy, (void)gx, (void)acc, (void)scratch,
          (void)stored, (void)n;
    }
  }
};

// The fused node on dual variables: one custom_op over the array arguments (tensors as constant
// variables), the scalars captured.
template <class D, class F, bool S, class... A>
auto fused_duals(kernel<F, S> const &k, A const &...a) {
  static_assert(tape_dual_v<D>, "dualcast::fused: a tape over duals holds dual<float, K> or "
                                "dual<double, K> elements (not nested duals)");
  using R = real_part_t<D>;
  using P = dual_call_plan<A...>;
  using C = dual_fused_call<D, P, A...>;
  static constexpr int NX = P::arrays, NA = P::vars; // (static: clang captures no constexpr local)
  static constexpr int K = D::size;
  static constexpr std::size_t NO =
      output_count<decltype(k.f(std::declval<std::conditional_t<is_array_arg_v<A>, D, R>>()...))>;
  static constexpr char const *name = "dualcast::fused";
  tape *tp = tape_of(name, a...);
  std::vector<var<D>> arrays;
  arrays.reserve(std::size_t(NX));
  auto collect = [&](auto const &x) {
    if constexpr (is_var_v<decltype(x)>)
      arrays.push_back(x);
    else if constexpr (is_tensor_v<decltype(x)>)
      arrays.push_back(var<D>(x, nullptr, tp));
  };
  (collect(a), ...);
  typename C::scalars const sc{scalar_slot<R>(a)...};
  F const f = k.f;
  auto const seq = std::index_sequence_for<A...>{};

  // The array arguments' values and tangents (tangent k of array i at k * NX + i), read in place
  // from the dual arrays (part_view: strided plain views): the arguments of the kernel's and
  // tangent_fn's SIMD passes.
  struct parts {
    std::array<view<R const>, std::size_t(NX)> vals;
    std::array<view<R const>, std::size_t(NX *K)> tv;
  };
  auto parts_of = [](auto const &xs) {
    parts r;
    for (int i = 0; i < NX; ++i) {
      r.vals[std::size_t(i)] = part_view(xs[std::size_t(i)], 0);
      for (int k = 0; k < K; ++k)
        r.tv[std::size_t(k * NX + i)] = part_view(xs[std::size_t(i)], 1 + k);
    }
    return r;
  };
  // g(arg(0), ..., arg(n-1)): the arrays as their values' views, the scalars as they are.
  auto with_args = [sc, seq](parts const &x, auto const &g) {
    return [&]<std::size_t... p>(std::index_sequence<p...>) {
      auto arg = [&]<std::size_t q>(std::integral_constant<std::size_t, q>) {
        if constexpr (P::array_index[q] >= 0)
          return x.vals[std::size_t(P::array_index[q])];
        else
          return std::get<q>(sc);
      };
      return g(arg(std::integral_constant<std::size_t, p>{})...);
    }
    (seq);
  };

  // Whether the plain tape's node of this call stores its partials (policy::automatic: the tape's
  // default or the cost model, ops/fused/cost_model.hpp, on the same counts): then forward runs
  // the plain store node's pass -- the values and the partials d y / d x together, its bits -- and
  // keeps the partials for backward's cotangent values (as long as the store node keeps its own),
  // instead of a values pass here and one more pass over the inputs in backward for the partials.
  // Otherwise forward runs the plain recompute node's values pass, and backward the partials'.
  int n_required = 0;
  std::size_t input_bytes = 0;
  for (auto const &v : arrays) {
    n_required += v.requires_grad() ? 1 : 0;
    input_bytes += std::size_t(v.size()) * sizeof(R);
  }
  policy_kind const tape_default = tp ? tp->default_policy : policy_kind::automatic;
  auto stores = [n_required, input_bytes, tape_default](index_t n) {
    return choose_policy(policy_kind::automatic, tape_default,
                         compiled_nodes<policy_kind::automatic, int(NO), NA>::store, int(NO),
                         n_required, n, sizeof(R), input_bytes) == policy_kind::store;
  };

  using Flat = dual_flat_passes<D, P, A...>;
  auto forward = [f, sc, parts_of, with_args, stores](auto const &ex, auto &ctx,
                                                      std::vector<tensor<D>> const &xs) {
    shape shapes[NX];
    int pos[NX];
    bool flat = true;
    for (int i = 0; i < NX; ++i) {
      dual_host_only(name, xs[std::size_t(i)].dev());
      shapes[i] = xs[std::size_t(i)].dims(), pos[i] = i;
      ctx.save(xs[std::size_t(i)]);
      flat = flat && xs[std::size_t(i)].is_contiguous();
    }
    shape const s = broadcast_shapes(name, static_cast<shape const *>(shapes), pos, NX);
    // The outputs, written in place: their values by the plain kernel (the plain tape's SIMD
    // pass: its bits), their tangents by tangent_fn.
    std::array<tensor<D>, NO> ys;
    for (auto &t : ys)
      t = tensor<D>::empty(s);
    for (int i = 0; flat && i < NX; ++i)
      flat = shapes[i] == s;
    if (flat) {
      std::array<R const *, NX> xp;
      for (std::size_t i = 0; i < std::size_t(NX); ++i)
        xp[i] = reinterpret_cast<R const *>(xs[i].data());
      std::array<R *, NO> yp;
      for (std::size_t o = 0; o < NO; ++o)
        yp[o] = reinterpret_cast<R *>(ys[o].raw_data());
      R *pd = nullptr;
      if constexpr (NA > 0) {
        if (ctx.requires_grad() && stores(s.size())) {
          ctx.data = tensor<R>::empty(shape{index_t(NO * std::size_t(NA)), s.size()});
          pd = ctx.data.raw_data();
        }
      }
      Flat::template forward<S>(ex, f, sc, xp, yp, pd, s.size());
      if constexpr (NO == 1)
        return ys[0];
      else
        return ys;
    }
    parts const x = parts_of(xs);
    [&]<std::size_t... o, std::size_t... j, std::size_t... t>(
        std::index_sequence<o...>, std::index_sequence<j...>, std::index_sequence<t...>) {
      with_args(x, [&](auto const &...arg) {
        bool stored = false;
        if constexpr (NA > 0) {
          if (ctx.requires_grad() && stores(s.size())) {
            index_t const n = s.size();
            ctx.data = tensor<R>::empty(shape{index_t(NO * std::size_t(NA)), n});
            R *const pd = ctx.data.raw_data();
            [&]<std::size_t... q>(std::index_sequence<q...>) {
              apply_fresh(ex, kernel<F, S>{f}, active_of<A...>{}, out(part_raw_view(ys[o], 0)...),
                          out(view<R>(pd + index_t(q) * n, s)...), arg...);
            }
            (std::make_index_sequence<NO * std::size_t(NA)>{});
            stored = true;
          }
        }
        if (!stored)
          apply_fresh(ex, kernel<F, S>{f}, out(part_raw_view(ys[o], 0)...), arg...);
        if constexpr (NA == NX) { // (then variable a is array a)
          if (stored) {
            // Every array a variable: tangent k of output o is sum_a d y_o / d x_a times tangent
            // k of x_a, the store node's own contraction (contract_all_fn, zero wins where a
            // product is not finite) of the partials just kept, read a-major (o-major in
            // memory), instead of the kernel on duals once more (its transcendentals: a tenth of
            // a small MLP's H v).
            index_t const n = s.size();
            R const *const pd = ctx.data.data();
            for (int k = 0; k < K; ++k)
              [&]<std::size_t... a, std::size_t... q>(std::index_sequence<a...>,
                                                      std::index_sequence<q...>) {
                apply_fresh(ex, kernel<contract_all_fn<NA, int(NO)>, S>{{}},
                            out(part_raw_view(ys[o], 1 + k)...), x.tv[std::size_t(k * NX) + a]...,
                            view<R const>(pd + index_t((q % NO) * NA + q / NO) * n, s)...);
              }
            (std::make_index_sequence<std::size_t(NA)>{},
             std::make_index_sequence<NO * std::size_t(NA)>{});
            return;
          }
        }
        apply_fresh(ex, kernel<tangent_fn<F, P, K, false>, S>{{f}},
                    out(part_raw_view(ys[j / std::size_t(K)], 1 + int(j % std::size_t(K)))...),
                    arg..., x.tv[t]...);
      });
    }
    (std::make_index_sequence<NO>{}, std::make_index_sequence<NO * std::size_t(K)>{},
     std::make_index_sequence<std::size_t(NX * K)>{});
    if constexpr (NO == 1)
      return ys[0];
    else
      return ys;
  };

  auto backward = [f, sc, seq, parts_of, with_args](auto const &ex, auto const &ctx, auto &g) {
    if constexpr (NA > 0) {
      std::array<tensor<D> const *, NX> xs; // (the saved arrays, not copies)
      shape shapes[NX];
      int pos[NX];
      for (int i = 0; i < NX; ++i) {
        xs[std::size_t(i)] = &ctx.saved(std::size_t(i));
        shapes[i] = xs[std::size_t(i)]->dims(), pos[i] = i;
      }
      shape const s = broadcast_shapes(name, static_cast<shape const *>(shapes), pos, NX);
      index_t const n = s.size();
      std::array<tensor<D>, NO> gy;
      for (std::size_t o = 0; o < NO; ++o)
        gy[o] = g.out(o);
      // The needed variables' gradients, written part by part in place: each gradient itself
      // (g.target: overwritten where fresh, added to where it holds sums already) unless its
      // memory meets an earlier target's, or, holding sums, an array the passes read (a variable
      // passed twice, overlapping slices of one): then a fresh temporary, added to the gradient
      // at the end (g.add).
      std::array<tensor<D>, std::size_t(NX)> gx;
      std::array<bool, std::size_t(NX)> acc{}, temp{};
      extent_range read[NX + NO], placed[NX];
      for (int i = 0; i < NX; ++i)
        read[i] = tensor_range(*xs[std::size_t(i)]);
      for (std::size_t o = 0; o < NO; ++o)
        read[std::size_t(NX) + o] = tensor_range(gy[o]);
      int n_placed = 0;
      for (std::size_t u = 0; u < sizeof...(A); ++u) {
        int const i = P::array_index[u], a = P::var_index[u];
        if (a < 0 || !g.needs(std::size_t(i)))
          continue;
        auto [t, ac] = g.target(std::size_t(i));
        extent_range const r = tensor_range(t);
        bool meets = false;
        for (int q = 0; q < n_placed; ++q)
          meets = meets || ranges_meet(placed[q], r);
        for (int q = 0; ac && q < NX + int(NO); ++q)
          meets = meets || ranges_meet(read[q], r);
        if (meets) { // (a fresh gradient must hold zeros before g.add adds to it)
          if (!ac)
            t.assign_raw(tensor<D>::zeros(shape{}, t.dev()));
          gx[std::size_t(i)] = tensor<D>::empty(shapes[i]);
          temp[std::size_t(i)] = true;
        } else {
          gx[std::size_t(i)] = t;
          acc[std::size_t(i)] = ac;
          placed[n_placed++] = r;
        }
      }
      // A flat node (every array read or written contiguous, of the call's shape) runs its
      // passes on pointers (dual_flat_passes); any other on views of the parts.
      bool flat = true;
      for (std::size_t i = 0; i < std::size_t(NX); ++i)
        flat = flat && shapes[i] == s && xs[i]->is_contiguous() &&
               (!gx[i].defined() || (gx[i].dims() == s && gx[i].is_contiguous()));
      for (std::size_t o = 0; o < NO; ++o)
        flat = flat && gy[o].dims() == s && gy[o].is_contiguous();
      // Scratch rows of n elements, one allocation: a flat node's one row for the outputs of the
      // gradients not needed; else the plain cotangents' (NO (1 + NA) + 1), then NA for the VJP
      // passes' unneeded or broadcast outputs.
      std::size_t const plain_rows = NO * (1 + std::size_t(NA)) + 1;
      tensor<R> scratch =
          tensor<R>::empty(shape{index_t(flat ? std::size_t(1) : plain_rows + std::size_t(NA)), n});
      R *const sp = scratch.raw_data();
      R *const stored = ctx.data.defined() ? ctx.data.raw_data() : nullptr;
      if (flat) {
        std::array<R const *, NX> xp;
        std::array<R *, NX> gp{};
        for (std::size_t i = 0; i < std::size_t(NX); ++i) {
          xp[i] = reinterpret_cast<R const *>(xs[i]->data());
          if (gx[i].defined())
            gp[i] = reinterpret_cast<R *>(gx[i].raw_data());
        }
        std::array<R const *, NO> gyp;
        for (std::size_t o = 0; o < NO; ++o)
          gyp[o] = reinterpret_cast<R const *>(gy[o].data());
        Flat::template backward<S>(ex, f, sc, xp, gyp, gp, acc, sp, stored, n);
        for (int i = 0; i < NX; ++i)
          if (temp[std::size_t(i)])
            g.add(std::size_t(i), std::move(gx[std::size_t(i)]));
        return;
      }
      std::array<tensor<D>, NX> xt;
      for (std::size_t i = 0; i < std::size_t(NX); ++i)
        xt[i] = *xs[i];
      parts const x = parts_of(xt);
      // The output cotangents' parts, in place: gv values, gt[o * K + k] tangents; dst[i]: array
      // i's gradient's value part (none where no gradient is needed).
      std::array<view<R const>, NO> gv;
      std::array<view<R const>, NO * std::size_t(K)> gt;
      for (std::size_t o = 0; o < NO; ++o) {
        gv[o] = part_view(gy[o], 0);
        for (int k = 0; k < K; ++k)
          gt[o * std::size_t(K) + std::size_t(k)] = part_view(gy[o], 1 + k);
      }
      std::array<view<R>, std::size_t(NX)> dst{};
      for (std::size_t i = 0; i < std::size_t(NX); ++i)
        if (gx[i].defined())
          dst[i] = part_raw_view(gx[i], 0);
      // The values of the input cotangents: the plain store node's.
      C::template plain_cotangent_values<NO, S>(ex, f, sc, seq, x.vals, gv, s, dst, acc, sp,
                                                stored);
      // Tangent k of x_a's cotangent, sum_o ybar_o.d[k] * d y_o / d x_a + ybar_o.val *
      // d (y_o.d[k]) / d x_a, is the VJP of the kernel on direction k's tangents alone
      // (tangent_fn with one tangent: outputs y_o, then y_o.d[k]) with output cotangents
      // ybar_o.d[k] and ybar_o.val: one pass per direction, contracting in registers, instead of
      // writing every output's partials (NO (1 + K) NA arrays) and contracting them in further
      // passes. It writes partial k of each needed gradient of the call's shape in place (added
      // to where acc), the others into scratch (a broadcast one is then summed into its partial
      // k).
      using TF = tangent_fn<F, P, 1, true>;
      constexpr auto const &arr = P::var_array;
      for (int k = 0; k < K; ++k) {
        std::array<view<R>, std::size_t(NA)> cv;
        std::array<bool, std::size_t(NA)> cv_add{};
        for (int a = 0; a < NA; ++a) {
          std::size_t const i = std::size_t(arr[std::size_t(a)]);
          bool const in_place = dst[i].data() && shapes[i] == s;
          cv[std::size_t(a)] = in_place ? part_raw_view(gx[i], 1 + k)
                                        : view<R>(sp + index_t(plain_rows + std::size_t(a)) * n, s);
          cv_add[std::size_t(a)] = in_place && acc[i];
        }
        auto const *tk = x.tv.data() + std::size_t(k * NX);
        auto const *gk = gt.data() + std::size_t(k);
        [&]<std::size_t... i, std::size_t... o>(std::index_sequence<i...>,
                                                std::index_sequence<o...>) {
          with_args(x, [&](auto const &...arg) {
            using Layout =
                call_layout<std::decay_t<decltype(arg)>..., std::decay_t<decltype(tk[i])>...>;
            vjp_op<TF, Layout, int(2 * NO), one_evaluation_t<active_of<A...>>> op{
                {TF{f}, scalar_table<TF>(arg..., tk[i]...)}};
            apply_fresh_run<decltype(op), S, std::decay_t<decltype(ex)>, R>(
                ex, op, cv, cv_add, arg..., tk[i]..., gk[o * std::size_t(K)]..., gv[o]...);
          });
        }
        (std::make_index_sequence<std::size_t(NX)>{}, std::make_index_sequence<NO>{});
        for (int a = 0; a < NA; ++a) {
          std::size_t const i = std::size_t(arr[std::size_t(a)]);
          if (dst[i].data() && !(shapes[i] == s))
            backend_reduce(hook{}, ex, s, static_cast<R const *>(cv[std::size_t(a)].data()),
                           part_raw_view(gx[i], 1 + k), acc[i]);
        }
      }
      for (int i = 0; i < NX; ++i)
        if (temp[std::size_t(i)])
          g.add(std::size_t(i), std::move(gx[std::size_t(i)]));
    } else {
      (void)ex;
      (void)g;
      (void)ctx;
    }
  };
  return custom_op<tensor<R>>(name, forward, backward, arrays);
}

} // namespace dualcast::detail
