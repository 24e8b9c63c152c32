// dualcast/ops/lazy/operators.hpp: elementwise operators and math functions on tape variables,
// lazy.
//
//   auto e = dualcast::sigmoid(x) * y + z;   // nothing is computed or recorded yet
//   auto e2 = dualcast::tanh(e) * 2.0;       // still lazy: separate calls fuse
//   auto m = dualcast::matmul(e2, W);        // e2 becomes ONE fused node (one kernel), then matmul
//
// Every elementwise operator (+ - * / unary -, pow) and math function (exp, log, tanh, sigmoid,
// ... the list below) returns a dualcast::expr when an argument is a tape variable or already an
// expr; the other operand may be a tensor (a constant) or an arithmetic scalar. The expression
// becomes one fused node when consumed (ops/lazy/materialize.hpp).
#pragma once

#include <dualcast/config.hpp>
#include <dualcast/dual.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/math.hpp>
#include <dualcast/ops/lazy/expr.hpp>

#include <type_traits>

namespace dualcast {

namespace detail::lz {
template <class A, class B>
concept lazy_pair = (lazy_operand<A> || lazy_operand<B>)&&leaf_operand<A> &&leaf_operand<B>;

struct op_add {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x + y;
  }
};
struct op_sub {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x - y;
  }
};
struct op_mul {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x * y;
  }
};
struct op_div {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return x / y;
  }
};
struct op_pow { // a scalar with a SIMD batch: the scalar as a batch
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    if constexpr (std::is_arithmetic_v<X> && !std::is_arithmetic_v<Y> && !is_dual_v<Y>)
      return dualcast::pow(Y(x), y);
    else if constexpr (std::is_arithmetic_v<Y> && !std::is_arithmetic_v<X> && !is_dual_v<X>)
      return dualcast::pow(x, X(y));
    else
      return dualcast::pow(x, y);
  }
};
struct op_neg {
  template <class X> DUALCAST_HD auto operator()(X const &x) const { return -x; }
};
} // namespace detail::lz

template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator+(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_add>("dualcast::operator+", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator-(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_sub>("dualcast::operator-", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator*(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_mul>("dualcast::operator*", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator/(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_div>("dualcast::operator/", a, b);
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto pow(A const &a, B const &b) {
  return detail::lz::make_binary<detail::lz::op_pow>("dualcast::pow", a, b);
}
template <class A>
requires detail::lz::lazy_operand<A>
auto operator-(A const &a) { return detail::lz::make_unary<detail::lz::op_neg>("operator-", a); }

#define DUALCAST_DETAIL_LAZY_UNARY(fn)                                                             \
  namespace detail::lz {                                                                           \
  struct op_##fn {                                                                                 \
    template <class X> DUALCAST_HD auto operator()(X const &x) const { return dualcast::fn(x); }   \
  };                                                                                               \
  }                                                                                                \
  namespace detail {                                                                               \
  inline constexpr auto k_##fn = kernel(lz::op_##fn{});                                            \
  }                                                                                                \
  template <class A>                                                                               \
  requires detail::lz::lazy_operand<A>                                                             \
  auto fn(A const &a) { return detail::lz::make_unary<detail::lz::op_##fn>("dualcast::" #fn, a); }
DUALCAST_DETAIL_LAZY_UNARY(exp)
DUALCAST_DETAIL_LAZY_UNARY(expm1)
DUALCAST_DETAIL_LAZY_UNARY(exp2)
DUALCAST_DETAIL_LAZY_UNARY(log)
DUALCAST_DETAIL_LAZY_UNARY(log1p)
DUALCAST_DETAIL_LAZY_UNARY(log2)
DUALCAST_DETAIL_LAZY_UNARY(log10)
DUALCAST_DETAIL_LAZY_UNARY(sqrt)
DUALCAST_DETAIL_LAZY_UNARY(cbrt)
DUALCAST_DETAIL_LAZY_UNARY(sin)
DUALCAST_DETAIL_LAZY_UNARY(cos)
DUALCAST_DETAIL_LAZY_UNARY(tan)
DUALCAST_DETAIL_LAZY_UNARY(asin)
DUALCAST_DETAIL_LAZY_UNARY(acos)
DUALCAST_DETAIL_LAZY_UNARY(atan)
DUALCAST_DETAIL_LAZY_UNARY(sinh)
DUALCAST_DETAIL_LAZY_UNARY(cosh)
DUALCAST_DETAIL_LAZY_UNARY(tanh)
DUALCAST_DETAIL_LAZY_UNARY(asinh)
DUALCAST_DETAIL_LAZY_UNARY(acosh)
DUALCAST_DETAIL_LAZY_UNARY(atanh)
DUALCAST_DETAIL_LAZY_UNARY(erf)
DUALCAST_DETAIL_LAZY_UNARY(erfc)
DUALCAST_DETAIL_LAZY_UNARY(abs)
DUALCAST_DETAIL_LAZY_UNARY(relu)
DUALCAST_DETAIL_LAZY_UNARY(sigmoid)
DUALCAST_DETAIL_LAZY_UNARY(softplus)
#undef DUALCAST_DETAIL_LAZY_UNARY
} // namespace dualcast
