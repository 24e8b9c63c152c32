// dualcast/ops/fused.hpp: a kernel called on tape variables as ONE fused node (mixed mode).
//
//   constexpr auto cell = dualcast::kernel([](auto i, auto f, auto g, auto o, auto c) {
//     auto c2 = dualcast::sigmoid(f) * c + dualcast::sigmoid(i) * dualcast::tanh(g);
//     return dualcast::outputs(dualcast::sigmoid(o) * dualcast::tanh(c2), c2);
//   });
//   auto [h, c2] = dualcast::fused(cell, I, F, G, O, C);                          // cost model
//   auto [h, c2] = dualcast::fused(dualcast::policy::recompute, cell, I, F, G, O, C);
//
// Arguments: variables (differentiated: the kernel's active inputs), tensors (constants, never
// dualized), arithmetic scalars and lazy expressions (materialised first). ONE node is recorded
// per call; nothing inside the lambda is taped. Forward runs one fused pass: the values, plus
// under the store policy the diagonal partials d y_k / d x_a (ops/fused/store_node.hpp); under
// the recompute policy backward re-evaluates the duals instead (ops/fused/recompute_node.hpp).
// The policy is a compile-time tag (tape/policy.hpp): a call compiles only the node(s) it can take.
// policy::automatic picks by the cost model (ops/fused/cost_model.hpp), or by the tape's
// default_policy when that is set.
//
// Operators and math functions on variables (x * y, dualcast::sigmoid(x), ...) are lazy: they
// build an expression that becomes ONE fused node when consumed (ops/lazy/). Unfused mode
// (dualcast::unfused, dualcast::call: ops/lazy/unfused.hpp) evaluates the same lambda operation by
// operation instead.
#pragma once

#include <dualcast/kernel/detail/kernel_checks.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/math/functions.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/fused/args.hpp>
#include <dualcast/ops/fused/core.hpp>
#include <dualcast/ops/fused/cost_model.hpp>
#include <dualcast/ops/fused/dual_node.hpp>
#include <dualcast/ops/fused/float16_node.hpp>
#include <dualcast/ops/fused/recompute_node.hpp>
#include <dualcast/ops/fused/store_node.hpp>
#include <dualcast/tape/policy.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast {

template <class P, class F, bool S, class... A>
requires(is_policy_v<P> && (lazy_expr<A> || ...)) auto fused(P pol, kernel<F, S> const &k,
                                                             A const &...a) {
  return fused(pol, k, detail::as_var(a)...);
}

namespace detail {
// fused() on variables of float or double, its errors naming the operation `name` (a lazy
// expression's materialisation is "dualcast::eval": its leaves are checked here, once).
template <class P, class F, bool S, class... A>
auto fused_node(char const *name, P, kernel<F, S> const &k, A const &...a) {
  using T = typename detail::elem_of_args<A...>::type;
  static_assert(!std::is_void_v<T>,
                "dualcast::fused: give at least one variable or tensor argument");
  static_assert(((is_var_v<A> || is_tensor_v<A> || std::is_arithmetic_v<A>)&&...),
                "dualcast::fused: arguments must be variables, tensors or arithmetic scalars");
  static_assert(((std::is_void_v<typename detail::elem_of<A>::type> ||
                  std::is_same_v<typename detail::elem_of<A>::type, T>)&&...),
                "dualcast::fused: all arrays of one call must have the same element type");
  // static: usable in the nested lambdas below without a capture (g++ 12 wants one otherwise)
  static constexpr int K = detail::check_kernel<F, T, detail::kernel_arg_t<T, A>...>();
  using Active = detail::active_of<A...>;
  static constexpr int NA = Active::count;
  using compiled = detail::compiled_nodes<P::kind, K, NA>;
  tape *tp = detail::tape_of(name, a...);
  std::array<detail::arg_ref<T>, sizeof...(A)> refs{detail::ref_of<T>(a)...};
  detail::fused_args_info const info = detail::inspect_args(name, refs.data(), refs.size());
  device const dev = info.dev;
  cpu const host = tp ? tp->ex : detail::ambient_cpu();
  auto const on_stream = detail::tape_stream_scope(tp, dev); // (CUDA tensors: the tape's stream)
  // The rest runs with the executor of that device (tensor/detail/device_dispatch.hpp).
  return detail::on_device(name, dev, host, [&](auto const &ex) {
    // The array arguments' views built once, and the scalars: passed on by reference.
    using Layout = detail::arg_layout<detail::kernel_arg_t<T, A>...>;
    auto const ins = detail::arrays_of<T>(a...);
    shape const s = detail::broadcast_args(name, ins);
    std::array<tensor<T>, K> outs;
    for (auto &o : outs)
      o = tensor<T>::empty(s, dev);

    std::array<var<T>, K> result;
    if (info.n_required == 0 || !tp->grad_enabled()) { // (no_grad: values only)
      detail::values_pass<T, K, Layout>(ex, k, ins, detail::scalars_of<T>(a...), outs, s,
                                        detail::is_flat(ins, outs, s));
      for (int i = 0; i < K; ++i)
        result[std::size_t(i)] = var<T>(outs[std::size_t(i)], nullptr, tp);
      return detail::wrap_outputs(result);
    }

    std::array<detail::slot_ptr<T>, K> out_slots;
    for (int i = 0; i < K; ++i) {
      result[std::size_t(i)] = tp->make_output(outs[std::size_t(i)], true);
      out_slots[std::size_t(i)] = result[std::size_t(i)].slot();
    }
    policy_kind const chosen =
        detail::choose_policy(P::kind, tp->default_policy, compiled::store, K, info.n_required,
                              s.size(), sizeof(T), info.input_bytes);
    if constexpr (compiled::store) {
      if (chosen == policy_kind::store || !compiled::recompute) {
        detail::arena_array<detail::saved_tensor> none;
        detail::store_node<T, K, Active, Layout>(
            ex, *tp, k, ins, detail::scalars_of<T>(a...), outs, out_slots,
            detail::make_core<T>(tp->node_memory(), refs.data(), refs.size(), none, false, dev,
                                 host, s));
        return detail::wrap_outputs(result);
      }
    }
    if constexpr (compiled::recompute) {
      // (the array inputs kept alive, and version-checked, for the re-evaluation)
      detail::arena_array<detail::saved_tensor> saves;
      auto core = detail::make_core<T>(tp->node_memory(), refs.data(), refs.size(), saves, true,
                                       dev, host, s);
      detail::recompute_node<T, K, Active, Layout>(ex, *tp, k, ins, detail::scalars_of<T>(a...),
                                                   outs, out_slots, std::move(core),
                                                   std::move(saves), s);
    }
    return detail::wrap_outputs(result);
  });
}
} // namespace detail

// Calls a kernel on tape variables as ONE fused node under policy P (see the file comment).
template <class P, class F, bool S, class... A>
requires(is_policy_v<P> && !(lazy_expr<A> || ...) && !detail::any_duals_v<A...> &&
         !detail::any_float16_operand_v<A...>) auto fused(P pol, kernel<F, S> const &k,
                                                          A const &...a) {
  return detail::fused_node("dualcast::fused", pol, k, a...);
}

// The same on a tape over duals (variables of dual<T, K> elements: forward over reverse,
// ops/fused/dual_node.hpp); the policy does not apply (the node keeps its inputs and evaluates the
// kernel on nested duals in backward).
template <class P, class F, bool S, class... A>
requires(is_policy_v<P> && !(lazy_expr<A> || ...) &&
         detail::any_duals_v<A...>) auto fused(P, kernel<F, S> const &k, A const &...a) {
  using T = typename detail::elem_of_args<A...>::type;
  static_assert(((is_var_v<A> || is_tensor_v<A> || std::is_arithmetic_v<A>)&&...),
                "dualcast::fused: arguments must be variables, tensors or arithmetic scalars");
  static_assert(((std::is_void_v<typename detail::elem_of<A>::type> ||
                  std::is_same_v<typename detail::elem_of<A>::type, T>)&&...),
                "dualcast::fused: all arrays of one call must have the same element type");
  return detail::fused_duals<T>(k, a...);
}

// The same over bfloat16 / half variables and tensors. Arrays of one 16-bit type may sit beside
// float ones (a float cell state beside bfloat16 gates); then the outputs stay float, as float
// beside bfloat16 gives float in PyTorch (a 16-bit output: cast<bfloat16>(y)); without a float
// array they are of the 16-bit type. ONE node reads and writes the 16-bit storage itself
// (ops/fused/float16_node.hpp) and, as the policy or the cost model says, recomputes the float
// derivatives in backward or stores them (float partials) in forward.
template <class P, class F, bool S, class... A>
requires(is_policy_v<P> && !(lazy_expr<A> || ...) &&
         detail::any_float16_operand_v<A...>) auto fused(P pol, kernel<F, S> const &k,
                                                         A const &...a) {
  using T = typename detail::float16_elem_of_args<typename detail::elem_of<A>::type...>::type;
  static_assert(((std::is_void_v<typename detail::elem_of<A>::type> ||
                  std::is_same_v<typename detail::elem_of<A>::type, T> ||
                  std::is_same_v<typename detail::elem_of<A>::type, float>)&&...),
                "dualcast::fused: the arrays of a call with bfloat16 / half ones are of that one "
                "16-bit type or float (cast the others: dualcast::cast<float>)");
  constexpr bool any_float = (std::is_same_v<typename detail::elem_of<A>::type, float> || ...);
  using Out = std::conditional_t<any_float, float, T>;
  return detail::float16_fused<Out>(pol, k, a...);
}

// The same under policy::automatic.
template <class F, bool S, class... A>
requires(!is_policy_v<A> && ...) auto fused(kernel<F, S> const &k, A const &...a) {
  return fused(policy::automatic, k, a...);
}

} // namespace dualcast
