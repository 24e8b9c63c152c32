// dualcast/kernel/detail/kernel_checks.hpp: the compile-time side of a fused call: the element type
// of its arrays, the kernel's result on plain numbers, and checks that turn misuse into one
// readable static_assert instead of pages of template errors.
#pragma once

#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/kernel/detail/element_ops.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/numbers/simd.hpp>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dualcast::detail {

template <class A> struct element_of { using type = void; };
template <class T> struct element_of<view<T>> { using type = std::remove_cv_t<T>; };

// The element type a call computes in: the one shared by all its arrays, float where some are
// stored in 16 bits (bfloat16, half: widened on load, rounded once on store).
template <class E> using widened_t = std::conditional_t<is_float16_v<E>, float, E>;
template <class... V> struct common_element { using type = void; };
template <class V, class... Rest> struct common_element<V, Rest...> {
  using first = widened_t<typename element_of<std::decay_t<V>>::type>;
  using rest = typename common_element<Rest...>::type;
  using type = std::conditional_t<std::is_void_v<first>, rest, first>;
};
template <class T, class... V>
inline constexpr bool all_arrays_of =
    ((std::is_void_v<typename element_of<std::decay_t<V>>::type> ||
      std::is_same_v<typename element_of<std::decay_t<V>>::type, T> ||
      (std::is_same_v<T, float> && is_float16_v<typename element_of<std::decay_t<V>>::type>)) &&
     ...);
// The element type of a call's views: T, or detail::any_float (arrays/stored_view.hpp) where some
// array is stored in 16 bits, so that a call of any mix compiles its checks and plan once.
template <class... V>
inline constexpr bool any_float16_v = (false || ... ||
                                       is_float16_v<typename element_of<std::decay_t<V>>::type>);
template <class T, class... V>
using view_element_t = std::conditional_t<any_float16_v<V...>, any_float, T>;
// The layout of a call's arguments (element_ops.hpp), with 16-bit views counted as float ones:
// the layout knows only which arguments are arrays, so the element operation, and the batch loop
// compiled for it, is one type whatever the arrays' storage.
template <class A>
using layout_arg_t = std::conditional_t<is_float16_v<typename element_of<std::decay_t<A>>::type>,
                                        view<float const>, A>;
template <class... A> using call_layout = arg_layout<layout_arg_t<A>...>;

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
// Returns the number of outputs, or 0 after a failed check (whose message is then the only one:
// the checks after it are not compiled).
template <class F, class T, class... A> constexpr int check_kernel() {
  constexpr bool numbers = std::is_same_v<T, float> || std::is_same_v<T, double>;
  static_assert(numbers, "dualcast: arrays passed to a kernel must hold float or double");
  constexpr bool args = ((is_view_v<A> || std::is_arithmetic_v<std::decay_t<A>>)&&...);
  static_assert(args,
                "dualcast: kernel arguments must be dualcast::view arrays or arithmetic scalars");
  if constexpr (!numbers || !args) {
    return 0;
  } else {
    constexpr bool callable = std::is_invocable_v<F const &, scalar_arg_t<A, T>...>;
    static_assert(callable,
                  "dualcast: the kernel's lambda cannot be called with this number of arguments "
                  "(check the kernel's arity against the arguments passed)");
    if constexpr (!callable) {
      return 0;
    } else {
      static_assert(!returns_std_tuple<F, scalar_arg_t<A, T>...>(),
                    "dualcast: a kernel returns several outputs as dualcast::outputs(a, b, ...), "
                    "not as a std::tuple or std::pair");
      using R = scalar_result_t<F, T, A...>;
      constexpr bool outputs_ok = outputs_are_numbers<R>(std::make_index_sequence<R::size>{});
      static_assert(outputs_ok, "dualcast: every output of a kernel must be a number or a dual "
                                "number");
      return outputs_ok ? static_cast<int>(R::size) : 0;
    }
  }
}

// ---- the numbers a mode runs the lambda on ----------------------------------------------------
// The lane an array argument becomes: a SIMD batch on the CPU backend, a plain number one element
// at a time (per_element: Simd false; and under nvcc, whose host pass has no batches).
#if DUALCAST_HAS_SIMD
template <class T, bool Simd>
using lane_of = std::conditional_t<Simd, batch<T, native_width<T>>, T>;
#else
template <class T, bool Simd> using lane_of = T;
#endif

// The modes (kernel/detail/element_ops.hpp): values on plain lanes; partials and VJP with the
// active inputs of the first chunk as duals of that chunk's width; JVP with every active input a
// dual with one partial.
struct values_mode {
  static constexpr int duals_of(int) { return 0; }
};
template <class Active> struct chunked_mode {
  static constexpr int width = Active::count < Active::chunk ? Active::count : Active::chunk;
  static constexpr int duals_of(int p) {
    int const a = active_index<Active>(p);
    return a >= 0 && a < width ? width : 0;
  }
};
template <class Active> struct jvp_mode {
  static constexpr int duals_of(int p) { return active_index<Active>(p) >= 0 ? 1 : 0; }
};

template <class L, int Duals> struct lane_arg { using type = dual<L, Duals>; };
template <class L> struct lane_arg<L, 0> { using type = L; };
// What the mode passes for argument P of type A.
template <class Mode, class L, int P, class A>
using mode_arg_t = std::conditional_t<is_view_v<A>, typename lane_arg<L, Mode::duals_of(P)>::type,
                                      std::decay_t<A>>;

template <class F, class Mode, class L, class... A, std::size_t... P>
constexpr bool invocable_in_mode(std::index_sequence<P...>) {
  return std::is_invocable_v<F const &, mode_arg_t<Mode, L, int(P), A>...>;
}

// A lambda with fixed parameter types, checked against the numbers the mode runs it on: only
// such a lambda can be checked without compiling its body (a generic lambda's body is checked
// as it is compiled; a std:: math function in it gets its message from
// math/detail/std_functions.hpp).
template <class F, bool Simd, class Mode, class T, class... A> constexpr bool check_lanes() {
  if constexpr (fixed_parameters<F>) {
    constexpr bool ok =
        invocable_in_mode<F, Mode, lane_of<T, Simd>, A...>(std::index_sequence_for<A...>{});
    static_assert(ok, "dualcast: the kernel's lambda takes fixed parameter types (such as double), "
                      "but a kernel runs it on SIMD batches and dual numbers: write a generic "
                      "lambda, [](auto a, auto b) { ... }, with dualcast:: math functions "
                      "(dualcast::exp, not std::exp); or, for values only, one element at a "
                      "time, declare dualcast::kernel(f, dualcast::per_element)");
    return ok;
  } else {
    return true;
  }
}

template <class... V> struct type_list {};

// Every compile-time check of a call, in order, each only after the ones before it passed: its
// element types (Arrays: all of the call's arrays), the kernel against its arguments A, the
// numbers the mode runs it on. The call compiles the rest of its body only when this is true,
// so that a failed check is the only error (a float array among double ones gave the message
// and then some 50 lines of errors from the code after it).
template <class F, bool Simd, class Mode, class T, class... V, class... A>
constexpr bool call_fits(type_list<V...>, type_list<A...>) {
  constexpr bool same = all_arrays_of<T, V...>;
  static_assert(same, "dualcast: all arrays of one call must have the same element type (float "
                      "and double arrays mixed? convert one of them first; bfloat16 and half "
                      "arrays mix with float ones)");
  if constexpr (!same)
    return false;
  else if constexpr (check_kernel<F, T, A...>() == 0)
    return false;
  else
    return check_lanes<F, Simd, Mode, T, A...>();
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
