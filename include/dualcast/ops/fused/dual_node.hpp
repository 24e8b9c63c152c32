// dualcast/ops/fused/dual_node.hpp: the fused elementwise node on a tape over duals (forward over
// reverse: variables of dual<T, K> elements, docs/higher-order.md).
//
// The node is the fused node of the plain tape with one more level of nesting. Forward: the
// values are the kernel run by `apply` on the values' parts (the plain tape's SIMD pass, so the
// values have its bits), the partials the kernel run on the dual<T, K> elements. Backward: the
// kernel run on dual<dual<T, K>, NA> (NA: the node's variables, each seeded in its own outer
// partial), whose outer partials d y / d x_a are dual<T, K> numbers -- the first derivatives and
// their directional derivatives in one pass -- and x_a's cotangent gets sum_k ybar_k * d y_k / d
// x_a in dual arithmetic: the gradient and its tangent (the Hessian-vector product's term)
// together; the values of those cotangents are then recomputed as the plain store node computes
// them (plain_cotangent_values), so that the gradient's values have the plain tape's bits. The
// tangent passes run one element at a time on the host (the CPU backend's batches hold plain
// numbers): correctness first.
#pragma once

#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/fused/args.hpp>
#include <dualcast/ops/fused/store_node.hpp>
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
};

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

  // The kernel on element values x[0..NX) (of type X, or a per-array function of them) and the
  // scalars, arguments in call order.
  template <class F, class Get, std::size_t... p>
  static auto call(F const &f, Get const &get, scalars const &sc, std::index_sequence<p...>) {
    auto one = [&]<std::size_t q>(std::integral_constant<std::size_t, q>) -> decltype(auto) {
      if constexpr (P::array_index[q] >= 0)
        return get(std::integral_constant<int, P::array_index[q]>{},
                   std::integral_constant<int, P::var_index[q]>{});
      else
        return std::get<q>(sc);
    };
    return as_outputs(f(one(std::integral_constant<std::size_t, p>{})...));
  }

  // The values of the input cotangents gx (their real parts) as the plain tape's store node
  // computes them (ops/fused/store_node.hpp), so that they have its bits: the partials
  // d y_k / d x_a by the plain SIMD pass, contracted with the cotangents' values by its contraction
  // kernel, summed over broadcast dimensions by the backend's reduction.
  template <std::size_t NO, bool S, class Ex, class F, class Seq, std::size_t NX_>
  static void plain_cotangent_values(Ex const &ex, F const &f, scalars const &sc, Seq seq,
                                     std::array<tensor<D>, NX_> const &xs,
                                     std::array<tensor<D>, NO> const &gy, shape const &s,
                                     std::array<tensor<D>, NX_> const &gx) {
    std::array<tensor<R>, NX_> vals;
    for (std::size_t i = 0; i < NX_; ++i)
      vals[i] = dual_component(xs[i], -1);
    std::array<tensor<R>, NO> yv, gyv;
    for (std::size_t o = 0; o < NO; ++o) {
      yv[o] = tensor<R>::empty(s);
      gyv[o] = dual_component(gy[o], -1);
    }
    std::array<tensor<R>, NO * std::size_t(NA)> pv;
    for (auto &t : pv)
      t = tensor<R>::empty(s);
    [&]<std::size_t... o, std::size_t... q, std::size_t... p>(
        std::index_sequence<o...>, std::index_sequence<q...>, std::index_sequence<p...>) {
      auto arg = [&]<std::size_t u>(std::integral_constant<std::size_t, u>) {
        if constexpr (P::array_index[u] >= 0)
          return vals[std::size_t(P::array_index[u])].cview();
        else
          return std::get<u>(sc);
      };
      apply(ex, kernel<F, S>{f}, active_of<A...>{}, out(yv[o].raw_view()...),
            out(pv[q].raw_view()...), arg(std::integral_constant<std::size_t, p>{})...);
    }
    (std::make_index_sequence<NO>{}, std::make_index_sequence<NO * std::size_t(NA)>{}, seq);
    for (std::size_t u = 0; u < sizeof...(A); ++u) {
      int const i = P::array_index[u], a = P::var_index[u];
      if (a < 0 || !gx[std::size_t(i)].defined())
        continue;
      tensor<R> c = tensor<R>::empty(s);
      [&]<std::size_t... k>(std::index_sequence<k...>) {
        apply(ex, contract_kernel, out(c.raw_view()),
              (k % 2 == 0 ? gyv[k / 2].cview()
                          : pv[(k / 2) * std::size_t(NA) + std::size_t(a)].cview())...);
      }
      (std::make_index_sequence<2 * NO>{});
      tensor<D> const &t = gx[std::size_t(i)];
      tensor<R> r = c;
      if (!(t.dims() == s)) {
        r = tensor<R>::empty(t.dims());
        backend_reduce(hook{}, ex, s, static_cast<R const *>(c.data()), r.raw_view(), false);
      }
      set_dual_component(t, -1, r);
    }
  }
};

// Output k of a kernel's outputs as D (a constant output has no partials).
template <class D, class Y> D as_dual_out(Y const &y) {
  if constexpr (is_dual_v<Y>)
    return y;
  else
    return D(y);
}

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
  constexpr std::size_t NO =
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

  auto forward = [f, sc, seq](auto const &ex, auto &ctx, std::vector<tensor<D>> const &xs) {
    shape shapes[NX];
    int pos[NX];
    for (int i = 0; i < NX; ++i) {
      dual_host_only(name, xs[std::size_t(i)].dev());
      shapes[i] = xs[std::size_t(i)].dims(), pos[i] = i;
      ctx.save(xs[std::size_t(i)]);
    }
    shape const s = broadcast_shapes(name, static_cast<shape const *>(shapes), pos, NX);
    std::array<tensor<D>, NO> ys;
    for (auto &y : ys)
      y = tensor<D>::empty(s);
    // The values: the plain kernel on the values' parts, the plain tape's SIMD pass (its bits).
    std::array<tensor<R>, NX> vals;
    for (int i = 0; i < NX; ++i)
      vals[std::size_t(i)] = dual_component(xs[std::size_t(i)], -1);
    std::array<tensor<R>, NO> yv;
    for (auto &y : yv)
      y = tensor<R>::empty(s);
    [&]<std::size_t... o, std::size_t... p>(std::index_sequence<o...>, std::index_sequence<p...>) {
      auto arg = [&]<std::size_t q>(std::integral_constant<std::size_t, q>) {
        if constexpr (P::array_index[q] >= 0)
          return vals[std::size_t(P::array_index[q])].cview();
        else
          return std::get<q>(sc);
      };
      apply(ex, kernel<F, S>{f}, out(yv[o].raw_view()...),
            arg(std::integral_constant<std::size_t, p>{})...);
    }
    (std::make_index_sequence<NO>{}, seq);
    // The partials: the kernel on the dual elements, one at a time.
    std::array<view<D const>, NX> xv;
    for (int i = 0; i < NX; ++i)
      xv[std::size_t(i)] = xs[std::size_t(i)].cview().broadcast_to(s);
    strided_walk<std::size_t(NX)> w{s};
    for (int i = 0; i < NX; ++i)
      w.strides[i] = xv[std::size_t(i)].strides();
    index_t const n = s.size();
    for (index_t e = 0; e < n; ++e, w.next()) {
      auto r = C::call(
          f,
          [&](auto i, auto) -> D const & {
            return xv[std::size_t(decltype(i)::value)].data()[w.off[decltype(i)::value]];
          },
          sc, seq);
      [&]<std::size_t... o>(std::index_sequence<o...>) {
        ((ys[o].raw_data()[e] = as_dual_out<D>(get<o>(r)),
          ys[o].raw_data()[e].val = yv[o].data()[e]),
         ...);
      }
      (std::make_index_sequence<NO>{});
    }
    if constexpr (NO == 1)
      return ys[0];
    else
      return ys;
  };

  auto backward = [f, sc, seq](auto const &ex, auto const &ctx, auto &g) {
    if constexpr (NA > 0) {
      using N2 = dual<D, NA>;
      std::array<tensor<D>, NX> xs;
      shape shapes[NX];
      int pos[NX];
      for (int i = 0; i < NX; ++i) {
        xs[std::size_t(i)] = ctx.saved(std::size_t(i));
        shapes[i] = xs[std::size_t(i)].dims(), pos[i] = i;
      }
      shape const s = broadcast_shapes(name, static_cast<shape const *>(shapes), pos, NX);
      // The cotangents of the inputs that need one, accumulated in their own shapes (broadcast
      // inputs: stride 0 over the broadcast dimensions, summed in row-major order).
      std::array<tensor<D>, NX> gx;
      std::array<view<D>, NX> gv;
      std::array<view<D const>, NX> xv;
      std::array<tensor<D>, NO> gy;
      std::array<view<D const>, NO> gyv;
      for (std::size_t o = 0; o < NO; ++o) {
        gy[o] = g.out(o);
        gyv[o] = gy[o].cview();
      }
      strided_walk<std::size_t(2 * NX + NO)> w{s};
      for (int i = 0; i < NX; ++i) {
        xv[std::size_t(i)] = xs[std::size_t(i)].cview().broadcast_to(s);
        if (g.needs(std::size_t(i))) {
          gx[std::size_t(i)] = tensor<D>::zeros(xs[std::size_t(i)].dims());
          gv[std::size_t(i)] = gx[std::size_t(i)].raw_view().broadcast_to(s);
        } else {
          gv[std::size_t(i)] = view<D>(nullptr, s); // (never written)
        }
        w.strides[i] = xv[std::size_t(i)].strides();
        w.strides[NX + i] = gv[std::size_t(i)].strides();
      }
      for (std::size_t o = 0; o < NO; ++o)
        w.strides[2 * NX + o] = gyv[o].strides();
      index_t const n = s.size();
      for (index_t e = 0; e < n; ++e, w.next()) {
        auto r = C::call(
            f,
            [&](auto i, auto a) {
              constexpr int ii = decltype(i)::value, aa = decltype(a)::value;
              D const &x = xv[std::size_t(ii)].data()[w.off[ii]];
              if constexpr (aa >= 0)
                return N2::variable(x, aa);
              else
                return x;
            },
            sc, seq);
        [&]<std::size_t... o>(std::index_sequence<o...>) {
          auto one = [&](auto const &y, D const &ybar) {
            if constexpr (is_dual_v<std::decay_t<decltype(y)>> &&
                          std::is_same_v<std::decay_t<decltype(y)>, N2>) {
              for (std::size_t q = 0; q < sizeof...(A); ++q) {
                int const i = P::array_index[q], av = P::var_index[q];
                if (av >= 0 && gx[std::size_t(i)].defined()) {
                  D &t = gv[std::size_t(i)].data()[w.off[NX + i]];
                  t = t + ybar * y.d[av];
                }
              }
            }
          };
          (one(get<o>(r), gyv[o].data()[w.off[2 * NX + int(o)]]), ...);
        }
        (std::make_index_sequence<NO>{});
      }
      C::template plain_cotangent_values<NO, S>(ex, f, sc, seq, xs, gy, s, gx);
      for (int i = 0; i < NX; ++i)
        if (gx[std::size_t(i)].defined())
          g.add(std::size_t(i), std::move(gx[std::size_t(i)]));
    } else {
      (void)ex;
      (void)g;
      (void)ctx;
    }
  };
  return custom_op(name, forward, backward, arrays);
}

} // namespace dualcast::detail
