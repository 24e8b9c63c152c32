// dualcast/kernel/detail/kernel_checks.hpp: the compile-time side of a fused call: the element type
// of its arrays, the kernel's result on plain numbers, and checks that turn misuse into one
// readable static_assert instead of pages of template errors.
#pragma once

#include <dualcast/arrays/view.hpp>
#include <dualcast/kernel/detail/element_ops.hpp>
#include <dualcast/kernel/kernel.hpp>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast::detail {

template <class A> struct element_of { using type = void; };
template <class T> struct element_of<view<T>> { using type = std::remove_cv_t<T>; };

// The element type shared by all arrays of a call.
template <class... V> struct common_element { using type = void; };
template <class V, class... Rest> struct common_element<V, Rest...> {
  using first = typename element_of<std::decay_t<V>>::type;
  using rest = typename common_element<Rest...>::type;
  using type = std::conditional_t<std::is_void_v<first>, rest, first>;
};
template <class T, class... V>
inline constexpr bool
    all_arrays_of = ((std::is_void_v<typename element_of<std::decay_t<V>>::type> ||
                      std::is_same_v<typename element_of<std::decay_t<V>>::type, T>)&&...);

// What the lambda receives for argument A when it runs on plain numbers of type T.
template <class A, class T>
using scalar_arg_t = std::conditional_t<is_view_v<A>, T, std::decay_t<A>>;

template <class F, class T, class... A>
using scalar_result_t =
    decltype(as_outputs(std::declval<F const &>()(std::declval<scalar_arg_t<A, T>>()...)));

template <class R, std::size_t... k> constexpr bool outputs_are_numbers(std::index_sequence<k...>) {
  return (is_number<std::decay_t<decltype(get<k>(std::declval<R>()))>>::value && ...);
}

template <class R> inline constexpr bool is_std_tuple = false;
template <class... X> inline constexpr bool is_std_tuple<std::tuple<X...>> = true;
template <class X, class Y> inline constexpr bool is_std_tuple<std::pair<X, Y>> = true;
template <class F, class... X> constexpr bool returns_std_tuple() {
  if constexpr (std::is_invocable_v<F const &, X...>)
    return is_std_tuple<std::decay_t<std::invoke_result_t<F const &, X...>>>;
  else
    return false;
}

// Compile-time checks shared by every mode; gives readable messages instead of template errors.
template <class F, class T, class... A> constexpr int check_kernel() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "dualcast: arrays passed to a kernel must hold float or double");
  static_assert(((is_view_v<A> || std::is_arithmetic_v<std::decay_t<A>>)&&...),
                "dualcast: kernel arguments must be dualcast::view arrays or arithmetic scalars");
  static_assert(std::is_invocable_v<F const &, scalar_arg_t<A, T>...>,
                "dualcast: the kernel's lambda cannot be called with this number of arguments "
                "(check the kernel's arity against the arguments passed)");
  static_assert(!returns_std_tuple<F, scalar_arg_t<A, T>...>(),
                "dualcast: a kernel returns several outputs as dualcast::outputs(a, b, ...), not "
                "as a std::tuple or std::pair");
  using R = scalar_result_t<F, T, A...>;
  static_assert(outputs_are_numbers<R>(std::make_index_sequence<R::size>{}),
                "dualcast: every output of a kernel must be a number or a dual number");
  return static_cast<int>(R::size);
}

template <class Layout, class Active> constexpr bool active_positions_valid() {
  for (int a = 0; a < Active::count; ++a) {
    int p = Active::positions[a];
    if (p < 0 || p >= Layout::arity || !Layout::is_array[p])
      return false;
    for (int b = 0; b < a; ++b)
      if (Active::positions[b] == p)
        return false;
  }
  return true;
}

template <int C, class Layout, int P = 0, int... Acc> constexpr auto all_arrays_active() {
  if constexpr (P == Layout::arity)
    return active_set<C, Acc...>{};
  else if constexpr (Layout::is_array[P])
    return all_arrays_active<C, Layout, P + 1, Acc..., P>();
  else
    return all_arrays_active<C, Layout, P + 1, Acc...>();
}

// The argument layout and scalar table of a call whose arguments are a std::tuple.
template <class Args> struct layout_of;
template <class... A> struct layout_of<std::tuple<A...>> { using type = arg_layout<A...>; };

// The default active set: every array argument.
template <class... A>
using default_active_t = decltype(all_arrays_active<default_chunk, arg_layout<A...>>());

} // namespace dualcast::detail
