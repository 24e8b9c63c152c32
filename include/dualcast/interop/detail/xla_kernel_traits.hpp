// dualcast/interop/detail/xla_kernel_traits.hpp: what the XLA FFI handlers of a kernel need to
// know about it at compile time: its number of inputs and outputs, and which inputs are
// differentiated (DUALCAST_XLA_KERNEL's positions, or all). Needs no XLA header.
#pragma once

#include <dualcast/kernel/detail/element_ops.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast::interop::xla::detail {

inline constexpr int max_arity = 16;

// N doubles as a tuple type. (Built by recursion, not by expanding a pack of indices through an
// alias: nvcc's host-code generator flattens such aliases and loses the pack.)
template <int N, class... A> struct doubles {
  using type = typename doubles<N - 1, double, A...>::type;
};
template <class... A> struct doubles<0, A...> { using type = std::tuple<A...>; };
template <class F, class Args> struct call_traits;
template <class F, class... A> struct call_traits<F, std::tuple<A...>> {
  static constexpr bool callable = std::is_invocable_v<F const &, A const &...>;
  static constexpr int outputs() {
    return int(dualcast::detail::output_count<std::invoke_result_t<F const &, A const &...>>);
  }
};

// The number of inputs a kernel's lambda takes: the smallest n it is callable with n doubles.
// (The lambda, not dualcast::kernel, whose call operator asserts on a wrong count.)
template <class F, int N = 0> constexpr int arity() {
  if constexpr (N > max_arity)
    return -1;
  else if constexpr (call_traits<F, typename doubles<N>::type>::callable)
    return N;
  else
    return arity<F, N + 1>();
}
// Its number of outputs.
template <class F> constexpr int output_count() {
  return call_traits<F, typename doubles<arity<F>()>::type>::outputs();
}

// The active set of DUALCAST_XLA_KERNEL: the positions given, or every input.
template <class F, int... I> struct active_of { using type = active_set<default_chunk, I...>; };
template <class F, std::size_t... I>
active_set<default_chunk, int(I)...> all_active(std::index_sequence<I...>);
template <class F> struct active_of<F> {
  using type = decltype(all_active<F>(std::make_index_sequence<std::size_t(arity<F>())>{}));
};
template <auto const &K, int... I>
using active_t = typename active_of<std::remove_cvref_t<decltype(K.f)>, I...>::type;

} // namespace dualcast::interop::xla::detail
