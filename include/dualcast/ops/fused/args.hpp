// dualcast/ops/fused/args.hpp: the arguments of a fused node on the tape -- variables (the
// kernel's active inputs), tensors (constants, never dualized) and arithmetic scalars -- as the
// kernel sees them (views and scalars), and the active set they make at compile time.
#pragma once

#include <dualcast/broadcast/detail/call_checks.hpp>
#include <dualcast/kernel/detail/element_ops.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast::detail {

template <class A> struct elem_of { using type = void; };
template <class T> struct elem_of<var<T>> { using type = T; };
template <class T> struct elem_of<tensor<T>> { using type = T; };
// The element type of the first variable or tensor among A.
template <class... A> struct elem_of_args { using type = void; };
template <class A, class... R> struct elem_of_args<A, R...> {
  using first = typename elem_of<std::remove_cvref_t<A>>::type;
  using type = std::conditional_t<std::is_void_v<first>, typename elem_of_args<R...>::type, first>;
};

// What the kernel receives for a fused node's argument: a view, or the scalar as T.
template <class T, class A> auto as_kernel_arg(A const &a) {
  if constexpr (is_var_v<A>)
    return a.value().cview();
  else if constexpr (is_tensor_v<A>)
    return a.cview();
  else
    return T(a);
}
template <class T, class A>
using kernel_arg_t = decltype(as_kernel_arg<T>(std::declval<A const &>()));

template <class T, class A> view<T const> array_view_of(A const &x) {
  if constexpr (is_var_v<A>)
    return x.value().cview();
  else
    return x.cview();
}

// A fused call's array arguments as views, each built in place, and its scalar table: what the
// node's passes read. (A std::tuple of the kernel's arguments, copied into the views' array
// again, moved about 1.6 KB of 144-byte views per 11-operand node: issue 36's profile; views
// assigned one by one into a zeroed array cost a memset and a store-forwarding stall each.)
template <class T, class... A> auto arrays_of(A const &...a) {
  using layout = arg_layout<kernel_arg_t<T, A>...>; // (where the arrays are among the arguments)
  static_assert(layout::num_arrays > 0, "dualcast: a fused call needs an array argument");
  static constexpr auto pos = layout::array_positions;
  std::tuple<A const &...> const all(a...);
  return [&]<std::size_t... i>(std::index_sequence<i...>) {
    return array_args<T, pos.size()>{{array_view_of<T>(std::get<pos[i]>(all))...}, {pos[i]...}};
  }
  (std::make_index_sequence<pos.size()>{});
}
template <class T, class A> auto scalar_or_marker(A const &a) {
  if constexpr (is_var_v<A> || is_tensor_v<A>)
    return array_marker{};
  else
    return T(a);
}
template <class T, class... A> auto scalars_of(A const &...a) {
  return typename arg_layout<kernel_arg_t<T, A>...>::scalars{make_tuple(scalar_or_marker<T>(a)...)};
}

template <class... A> inline constexpr int var_count = (0 + ... + (is_var_v<A> ? 1 : 0));

// The positions of the variables among A: the active inputs of the node's kernel.
template <class... A> constexpr auto var_positions() {
  std::array<int, var_count<A...> + 1> p{};
  bool is[] = {is_var_v<A>..., false};
  int n = 0;
  for (int i = 0; i < int(sizeof...(A)); ++i)
    if (is[i])
      p[std::size_t(n++)] = i;
  return p;
}
template <class... A, std::size_t... I> constexpr auto make_active(std::index_sequence<I...>) {
  constexpr auto p = var_positions<A...>();
  return active_set<default_chunk, p[I]...>{};
}
template <class... A>
using active_of = decltype(make_active<A...>(std::make_index_sequence<var_count<A...>>{}));

// K outputs as the caller sees them: one variable, or an array of K.
template <class T, std::size_t K> auto wrap_outputs(std::array<var<T>, K> const &v) {
  if constexpr (K == 1)
    return v[0];
  else
    return v;
}

} // namespace dualcast::detail
