// dualcast/interop/detail/xla_kernel_traits.hpp: what the XLA FFI handlers of a kernel need to
// know about it at compile time: its number of inputs and outputs, and which inputs are
// differentiated (DUALCAST_XLA_KERNEL's positions, or all). Needs no XLA header.
#pragma once

#include <dualcast/kernel/detail/element_ops.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace dualcast::interop::xla::detail {

inline constexpr int max_arity = 16;

// The number of inputs a kernel's lambda takes: the smallest n it is callable with n doubles.
// (The lambda, not dualcast::kernel, whose call operator asserts on a wrong count.)
template <class F, std::size_t... I> constexpr bool callable_with(std::index_sequence<I...>) {
  return std::is_invocable_v<F const &, decltype((void(I), 0.0))...>;
}
template <class F, int N = 0> constexpr int arity() {
  if constexpr (N > max_arity)
    return -1;
  else if constexpr (callable_with<F>(std::make_index_sequence<N>{}))
    return N;
  else
    return arity<F, N + 1>();
}
template <class F, std::size_t... I> constexpr int outputs_of(std::index_sequence<I...>) {
  using R = std::invoke_result_t<F const &, decltype((void(I), 0.0))...>;
  return int(dualcast::detail::output_count<R>);
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
