// dualcast/math/detail/std_functions.hpp: a readable error for a std:: math function called on
// dualcast's numbers -- std::exp(x) in a kernel's lambda, where x is a SIMD batch or a dual.
//
// std::exp has no overload for them, and g++ answered with some 75 lines listing every std::exp
// it has. These overloads, declared in std for dualcast's number types only, are chosen there
// instead and stop with one message naming dualcast's function. No valid program calls them: a
// call of one does not compile, and in generic code (`using std::exp; exp(x);`) dualcast's own
// overload, found by argument-dependent lookup, is more specialized (these take a trailing
// parameter pack) and wins. Declaring them in std is formally undefined behaviour; every supported
// compiler (g++, clang, nvcc) accepts it, and a program that is valid without them means the same
// with them.
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/numbers/simd.hpp>

#include <type_traits>

namespace dualcast::detail {
// dualcast's numbers that a std:: math function does not take.
template <class X>
inline constexpr bool non_std_number = is_dual_v<X>
#if DUALCAST_HAS_SIMD
                                       || is_batch_v<X>
#endif
    ;
template <class... X>
concept any_non_std_number = (non_std_number<std::remove_cvref_t<X>> || ...);

// The result type of a poisoned call (the first dual, else the first batch), so that the code
// after it compiles and the message stays the only error.
template <class... X> struct poisoned_result;
template <class X> struct poisoned_result<X> { using type = std::remove_cvref_t<X>; };
template <class X, class Y, class... Z> struct poisoned_result<X, Y, Z...> {
  using rest = typename poisoned_result<Y, Z...>::type;
  using x = std::remove_cvref_t<X>;
  using type = std::conditional_t<is_dual_v<x> || (non_std_number<x> && !is_dual_v<rest>), x, rest>;
};
template <class X> inline constexpr bool no_std_overload = false; // (a dependent false)
template <class... X> DUALCAST_HD typename poisoned_result<X...>::type poisoned_value() {
  return {};
}
} // namespace dualcast::detail

#define DUALCAST_DETAIL_STD_MESSAGE(stdname, dcname)                                               \
  "dualcast: std::" #stdname " does not take dualcast's numbers (a kernel's lambda runs on SIMD "  \
  "batches and dual numbers): write dualcast::" #dcname ", or, for values only, run the lambda "   \
  "one element at a time with dualcast::kernel(f, dualcast::per_element)"
#define DUALCAST_DETAIL_STD_POISON1(stdname, dcname)                                               \
  template <class X, class... None>                                                                \
  requires dualcast::detail::any_non_std_number<X> DUALCAST_HD                                     \
      typename dualcast::detail::poisoned_result<X>::type                                          \
      stdname(X const &, None...) {                                                                \
    static_assert(dualcast::detail::no_std_overload<X>,                                            \
                  DUALCAST_DETAIL_STD_MESSAGE(stdname, dcname));                                   \
    return dualcast::detail::poisoned_value<X>();                                                  \
  }
#define DUALCAST_DETAIL_STD_POISON2(stdname, dcname)                                               \
  template <class X, class Y, class... None>                                                       \
  requires dualcast::detail::any_non_std_number<X, Y> DUALCAST_HD                                  \
      typename dualcast::detail::poisoned_result<X, Y>::type                                       \
      stdname(X const &, Y const &, None...) {                                                     \
    static_assert(dualcast::detail::no_std_overload<X>,                                            \
                  DUALCAST_DETAIL_STD_MESSAGE(stdname, dcname));                                   \
    return dualcast::detail::poisoned_value<X, Y>();                                               \
  }

namespace std { // NOLINT(cert-dcl58-cpp): see the file comment
DUALCAST_DETAIL_STD_POISON1(exp, exp)
DUALCAST_DETAIL_STD_POISON1(expm1, expm1)
DUALCAST_DETAIL_STD_POISON1(exp2, exp2)
DUALCAST_DETAIL_STD_POISON1(log, log)
DUALCAST_DETAIL_STD_POISON1(log1p, log1p)
DUALCAST_DETAIL_STD_POISON1(log2, log2)
DUALCAST_DETAIL_STD_POISON1(log10, log10)
DUALCAST_DETAIL_STD_POISON1(sqrt, sqrt)
DUALCAST_DETAIL_STD_POISON1(cbrt, cbrt)
DUALCAST_DETAIL_STD_POISON1(sin, sin)
DUALCAST_DETAIL_STD_POISON1(cos, cos)
DUALCAST_DETAIL_STD_POISON1(tan, tan)
DUALCAST_DETAIL_STD_POISON1(asin, asin)
DUALCAST_DETAIL_STD_POISON1(acos, acos)
DUALCAST_DETAIL_STD_POISON1(atan, atan)
DUALCAST_DETAIL_STD_POISON1(sinh, sinh)
DUALCAST_DETAIL_STD_POISON1(cosh, cosh)
DUALCAST_DETAIL_STD_POISON1(tanh, tanh)
DUALCAST_DETAIL_STD_POISON1(asinh, asinh)
DUALCAST_DETAIL_STD_POISON1(acosh, acosh)
DUALCAST_DETAIL_STD_POISON1(atanh, atanh)
DUALCAST_DETAIL_STD_POISON1(erf, erf)
DUALCAST_DETAIL_STD_POISON1(erfc, erfc)
DUALCAST_DETAIL_STD_POISON1(floor, floor)
DUALCAST_DETAIL_STD_POISON1(ceil, ceil)
DUALCAST_DETAIL_STD_POISON1(round, round)
DUALCAST_DETAIL_STD_POISON1(abs, abs)
DUALCAST_DETAIL_STD_POISON1(fabs, abs)
DUALCAST_DETAIL_STD_POISON2(pow, pow)
DUALCAST_DETAIL_STD_POISON2(atan2, atan2)
DUALCAST_DETAIL_STD_POISON2(hypot, hypot)
DUALCAST_DETAIL_STD_POISON2(fmax, max)
DUALCAST_DETAIL_STD_POISON2(fmin, min)
} // namespace std

#undef DUALCAST_DETAIL_STD_POISON2
#undef DUALCAST_DETAIL_STD_POISON1
#undef DUALCAST_DETAIL_STD_MESSAGE
