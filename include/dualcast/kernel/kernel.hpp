// dualcast/kernel/kernel.hpp: elementwise kernels from generic lambdas, and their composition.
//
//   constexpr auto k = dualcast::kernel([](auto x, auto y) {
//     return dualcast::outputs(x * y, dualcast::sin(x));
//   });
//
// A kernel is a type (usable at compile time) wrapping the lambda. Called on plain numbers or
// duals it is just the lambda; dualcast::apply / jvp / vjp (broadcast/broadcast.hpp) run it over
// arrays as ONE fused pass. pipe(a, b) feeds a's outputs into b and fuse(a, b) runs both on the
// same inputs: both give again a single kernel, so a composition still runs as one pass.
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/numbers/detail/tuple.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/numbers/sparse_dual.hpp>

#include <type_traits>
#include <utility>

namespace dualcast {

// Several outputs of a kernel. A lambda returning one value has one output.
template <class... T> struct outputs_t : detail::tuple<T...> {};

template <class... T> DUALCAST_HD constexpr outputs_t<std::decay_t<T>...> outputs(T &&...x) {
  return {detail::make_tuple(static_cast<T &&>(x)...)};
}

template <class T> struct is_outputs : std::false_type {};
template <class... T> struct is_outputs<outputs_t<T...>> : std::true_type {};

namespace detail {
// Normalises a lambda's result to outputs_t.
template <class R> DUALCAST_HD constexpr auto as_outputs(R &&r) {
  if constexpr (is_outputs<std::decay_t<R>>::value)
    return static_cast<R &&>(r);
  else
    return outputs(static_cast<R &&>(r));
}
template <class R>
inline constexpr std::size_t output_count =
    std::decay_t<decltype(as_outputs(std::declval<R>()))>::size;

template <class F, class O, std::size_t... I>
DUALCAST_HD constexpr auto apply_outputs(F const &f, O const &o, std::index_sequence<I...>) {
  return f(get<I>(o)...);
}
template <class A, class B, std::size_t... I, std::size_t... J>
DUALCAST_HD constexpr auto concat_outputs(A const &a, B const &b, std::index_sequence<I...>,
                                          std::index_sequence<J...>) {
  return outputs(get<I>(a)..., get<J>(b)...);
}

// A number a kernel may return: arithmetic, a dual, or (on the CPU backend) a SIMD batch.
template <class T> struct is_number : std::is_arithmetic<T> {};
template <class T, int N> struct is_number<dual<T, N>> : is_number<T> {};
template <class V, class S> struct is_number<sparse_dual<V, S>> : is_number<V> {};
} // namespace detail

namespace detail {
// Whether F's call operator takes fixed parameter types ([](double a) {...}: its operator() is
// not a template, so its address can be taken).
template <class F>
concept fixed_parameters = requires {
  &F::operator();
};
} // namespace detail

// Evaluate SIMD batches (default) or one element at a time (for lambdas that convert values to
// integers, call non-dualcast functions, or otherwise cannot take a SIMD batch).
struct per_element_t {};
inline constexpr per_element_t per_element{};

template <class F, bool Simd = true> struct kernel {
  static_assert(std::is_trivially_copyable_v<F>,
                "dualcast: a kernel's lambda must be trivially copyable (capture values, not "
                "references or owning containers) so that it can be copied to the GPU");
  static constexpr bool simd = Simd;
  F f;

  constexpr kernel(F fn) : f(fn) {} // NOLINT(google-explicit-constructor)
  constexpr kernel(F fn, per_element_t) : f(fn) {}

  // On plain numbers or duals a kernel is its lambda.
  template <class... A> DUALCAST_HD constexpr auto operator()(A const &...a) const {
    constexpr bool callable = std::is_invocable_v<F const &, A const &...>;
    static_assert(callable || detail::fixed_parameters<F>,
                  "dualcast: the kernel's lambda cannot be called with this number of arguments "
                  "(check the kernel's arity against the arguments passed)");
    static_assert(callable || !detail::fixed_parameters<F>,
                  "dualcast: the kernel's lambda takes fixed parameter types and cannot be called "
                  "with these arguments (a dual or a SIMD batch?): write a generic lambda, "
                  "[](auto a, auto b) { ... }, with dualcast:: math functions");
    return f(a...);
  }
};
template <class F> kernel(F) -> kernel<F, true>;
template <class F> kernel(F, per_element_t) -> kernel<F, false>;

// sparse_partials(k): the same kernel, whose fused derivative modes (partials, VJP,
// value_and_vjp) run the lambda on sparse duals (numbers/sparse_dual.hpp): each intermediate
// carries only the partials of the inputs it depends on, so sigmoid(i) costs one multiplication
// whatever the kernel's number of active inputs. Opt-in because the sets are types: a lambda
// whose branches return values of different inputs, or whose loop accumulates over different
// inputs, does not compile with it (and gets a message saying so where a variable is assigned).
// A functor opts in with `static constexpr bool sparse_partials = true;`, or with
// `= sparse_partials_on_host;` (the ready cells, kernel/cells.hpp): sparse on the CPU, where they
// save arithmetic, and dense duals on a GPU, where the sparse ones can cost registers (the D-LSTM
// cell's double VJP spilled with them).
#ifdef __CUDA_ARCH__
inline constexpr bool sparse_partials_on_host = false;
#else
inline constexpr bool sparse_partials_on_host = true;
#endif
namespace detail {
template <class F>
concept has_sparse_partials = requires {
  requires F::sparse_partials;
};
template <class F> struct sparse_fn {
  F f;
  static constexpr bool sparse_partials = true;
  template <class... X>
  requires std::is_invocable_v<F const &, X const &...> DUALCAST_HD constexpr auto
  operator()(X const &...x) const {
    return f(x...);
  }
};
} // namespace detail
template <class F, bool S>
constexpr kernel<detail::sparse_fn<F>, S> sparse_partials(kernel<F, S> k) {
  return {detail::sparse_fn<F>{k.f}};
}

template <class T> struct is_kernel : std::false_type {};
template <class F, bool S> struct is_kernel<kernel<F, S>> : std::true_type {};

namespace detail {
template <class FA, class FB> struct piped {
  FA a;
  FB b;
  static constexpr bool sparse_partials = has_sparse_partials<FA> && has_sparse_partials<FB>;
  template <class... X> DUALCAST_HD constexpr auto operator()(X const &...x) const {
    auto r = as_outputs(a(x...));
    return apply_outputs(b, r, std::make_index_sequence<decltype(r)::size>{});
  }
};
template <class FA, class FB> struct fused {
  FA a;
  FB b;
  static constexpr bool sparse_partials = has_sparse_partials<FA> && has_sparse_partials<FB>;
  template <class... X> DUALCAST_HD constexpr auto operator()(X const &...x) const {
    auto ra = as_outputs(a(x...));
    auto rb = as_outputs(b(x...));
    return concat_outputs(ra, rb, std::make_index_sequence<decltype(ra)::size>{},
                          std::make_index_sequence<decltype(rb)::size>{});
  }
};
} // namespace detail

// pipe(a, b): b applied to the outputs of a, as one kernel.
template <class FA, bool SA, class FB, bool SB>
constexpr kernel<detail::piped<FA, FB>, SA && SB> pipe(kernel<FA, SA> a, kernel<FB, SB> b) {
  return {detail::piped<FA, FB>{a.f, b.f}};
}
// fuse(a, b): a and b on the same inputs, outputs of a then outputs of b, as one kernel.
template <class FA, bool SA, class FB, bool SB>
constexpr kernel<detail::fused<FA, FB>, SA && SB> fuse(kernel<FA, SA> a, kernel<FB, SB> b) {
  return {detail::fused<FA, FB>{a.f, b.f}};
}

} // namespace dualcast

// Structured bindings for outputs: auto [h, c] = k(x, y);
template <class... T>
struct std::tuple_size<dualcast::outputs_t<T...>>
    : std::integral_constant<std::size_t, sizeof...(T)> {};
template <std::size_t I, class... T> struct std::tuple_element<I, dualcast::outputs_t<T...>> {
  using type =
      std::decay_t<decltype(dualcast::detail::get<I>(std::declval<dualcast::outputs_t<T...>>()))>;
};
namespace dualcast {
template <std::size_t I, class... T>
DUALCAST_HD constexpr decltype(auto) get(outputs_t<T...> const &o) {
  return detail::get<I>(o);
}
template <std::size_t I, class... T> DUALCAST_HD constexpr decltype(auto) get(outputs_t<T...> &o) {
  return detail::get<I>(o);
}
// auto [a, b] = k(x, y) binds to the elements of a temporary.
template <std::size_t I, class... T> DUALCAST_HD constexpr decltype(auto) get(outputs_t<T...> &&o) {
  return static_cast<std::tuple_element_t<I, outputs_t<T...>> &&>(detail::get<I>(o));
}
} // namespace dualcast
