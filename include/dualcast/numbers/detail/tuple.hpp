// dualcast/numbers/detail/tuple.hpp: a minimal tuple usable in host and device code (std::tuple is
// not device-callable, and Boost.Hana is host-only under nvcc; see notes/toolchain.md).
#pragma once

#include <dualcast/core/config.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace dualcast::detail {

template <std::size_t I, class T> struct tuple_leaf { T value; };

template <class Indices, class... T> struct tuple_base;
template <std::size_t... I, class... T>
struct tuple_base<std::index_sequence<I...>, T...> : tuple_leaf<I, T>... {};

template <class... T> struct tuple : tuple_base<std::index_sequence_for<T...>, T...> {
  static constexpr std::size_t size = sizeof...(T);
};

template <std::size_t I, class T> DUALCAST_HD constexpr T &get_leaf(tuple_leaf<I, T> &l) {
  return l.value;
}
template <std::size_t I, class T>
DUALCAST_HD constexpr T const &get_leaf(tuple_leaf<I, T> const &l) {
  return l.value;
}
template <std::size_t I, class... T> DUALCAST_HD constexpr decltype(auto) get(tuple<T...> &t) {
  return get_leaf<I>(t);
}
template <std::size_t I, class... T>
DUALCAST_HD constexpr decltype(auto) get(tuple<T...> const &t) {
  return get_leaf<I>(t);
}

template <class... T> DUALCAST_HD constexpr tuple<std::decay_t<T>...> make_tuple(T &&...x) {
  return {{{static_cast<T &&>(x)}...}};
}

// The I-th of a pack of arguments (a reference to it). Through a tuple of pointers rather than by
// recursion: one instantiation per pack, not one per (index, suffix of the pack) -- a kernel with
// 40 arguments that reads each of them would otherwise instantiate hundreds of functions.
template <std::size_t I, class... X> DUALCAST_HD constexpr decltype(auto) nth(X const &...x) {
  static_assert(I < sizeof...(X), "dualcast: argument index out of range");
  return *get<I>(tuple<X const *...>{{{&x}...}});
}

template <class T> struct is_tuple : std::false_type {};
template <class... T> struct is_tuple<tuple<T...>> : std::true_type {};

} // namespace dualcast::detail
