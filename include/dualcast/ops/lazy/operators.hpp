// dualcast/ops/lazy/operators.hpp: elementwise operators and math functions on tape variables,
// lazy.
//
//   auto e = dualcast::sigmoid(x) * y + z;   // nothing is computed or recorded yet
//   auto e2 = dualcast::tanh(e) * 2.0;       // still lazy: separate calls fuse
//   auto m = dualcast::matmul(e2, W);        // e2 becomes ONE fused node (one kernel), then matmul
//
// Every elementwise operator (+ - * / unary -, pow, atan2, hypot, maximum, minimum, clamp, where)
// and math function (exp, log, tanh, sigmoid, floor, ... the list below) returns a dualcast::expr
// when an argument is a tape variable or already an expr; the other operand may be a tensor (a
// constant) or an arithmetic scalar. The expression becomes one fused node when consumed
// (ops/lazy/materialize.hpp).
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/ops/lazy/expr.hpp>

#include <type_traits>
#include <utility>

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
struct op_atan2 {
  template <class Y, class X> DUALCAST_HD auto operator()(Y const &y, X const &x) const {
    return dualcast::atan2(y, x);
  }
};
struct op_hypot {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return dualcast::hypot(x, y);
  }
};
struct op_maximum { // a tie gives half the derivative to each side (math/dual.hpp)
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return dualcast::max(x, y);
  }
};
struct op_minimum {
  template <class X, class Y> DUALCAST_HD auto operator()(X const &x, Y const &y) const {
    return dualcast::min(x, y);
  }
};
// min(max(x, lo), hi) as two selections on the values: the derivative is x's where
// lo <= x <= hi (inclusive, like PyTorch), lo's below, hi's above; lo > hi gives hi (PyTorch's
// value); NaN in x passes through.
struct op_clamp {
  template <class X, class L, class H>
  DUALCAST_HD auto operator()(X const &x, L const &lo, H const &hi) const {
    auto t = dualcast::select(dualcast::value_of(x) < dualcast::value_of(lo), lo, x);
    return dualcast::select(dualcast::value_of(t) > dualcast::value_of(hi), hi, t);
  }
};
// a where c != 0, else b (numpy / PyTorch where with the condition as numbers: both sides are
// evaluated, the unselected side gets no gradient, the condition never has one).
struct op_where {
  template <class C, class A, class B>
  DUALCAST_HD auto operator()(C const &c, A const &a, B const &b) const {
    auto cv = dualcast::value_of(c);
    return dualcast::select(cv != decltype(cv)(0), a, b);
  }
};
struct op_neg {
  template <class X> DUALCAST_HD auto operator()(X const &x) const { return -x; }
};
} // namespace detail::lz

namespace detail::lz {
// where's arguments: the condition a variable, an expression or a tensor; some argument lazy.
template <class C>
concept where_cond = lazy_operand<C> || is_tensor_v<C>;
template <class C, class A, class B>
concept some_lazy = lazy_operand<C> || lazy_operand<A> || lazy_operand<B>;
template <class C, class A, class B>
concept where_args = where_cond<C> && leaf_operand<A> && leaf_operand<B> && some_lazy<C, A, B>;
} // namespace detail::lz

template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator+(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_add>("dualcast::operator+", std::forward<A>(a),
                                                     std::forward<B>(b));
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator-(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_sub>("dualcast::operator-", std::forward<A>(a),
                                                     std::forward<B>(b));
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator*(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_mul>("dualcast::operator*", std::forward<A>(a),
                                                     std::forward<B>(b));
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto operator/(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_div>("dualcast::operator/", std::forward<A>(a),
                                                     std::forward<B>(b));
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto pow(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_pow>("dualcast::pow", std::forward<A>(a),
                                                     std::forward<B>(b));
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto atan2(A &&y, B &&x) {
  return detail::lz::make_binary<detail::lz::op_atan2>("dualcast::atan2", std::forward<A>(y),
                                                       std::forward<B>(x));
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto hypot(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_hypot>("dualcast::hypot", std::forward<A>(a),
                                                       std::forward<B>(b));
}
// Elementwise max / min with broadcasting (PyTorch's maximum / minimum; max / min are the
// reductions, ops/reduce.hpp). NaN in either argument propagates.
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto maximum(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_maximum>("dualcast::maximum", std::forward<A>(a),
                                                         std::forward<B>(b));
}
template <class A, class B>
requires detail::lz::lazy_pair<A, B>
auto minimum(A &&a, B &&b) {
  return detail::lz::make_binary<detail::lz::op_minimum>("dualcast::minimum", std::forward<A>(a),
                                                         std::forward<B>(b));
}
// x clamped to [lo, hi]; lo and hi are scalars, tensors, variables or expressions (broadcast).
template <class X, class L, class H>
requires detail::lz::lazy_operand<X> && detail::lz::leaf_operand<L> && detail::lz::leaf_operand<H>
auto clamp(X &&x, L &&lo, H &&hi) {
  return detail::lz::make_ternary<detail::lz::op_clamp>("dualcast::clamp", std::forward<X>(x),
                                                        std::forward<L>(lo), std::forward<H>(hi));
}
// a where cond != 0, else b, broadcast together. cond: a tensor (a mask of 0 / 1 values), or a
// variable or expression whose values decide (no gradient flows into it).
template <class C, class A, class B>
requires detail::lz::where_args<C, A, B>
auto where(C &&cond, A &&a, B &&b) {
  return detail::lz::make_ternary<detail::lz::op_where>("dualcast::where", std::forward<C>(cond),
                                                        std::forward<A>(a), std::forward<B>(b));
}
template <class A>
requires detail::lz::lazy_operand<A>
auto operator-(A &&a) {
  return detail::lz::make_unary<detail::lz::op_neg>("operator-", std::forward<A>(a));
}

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
  auto fn(A &&a) {                                                                                 \
    return detail::lz::make_unary<detail::lz::op_##fn>("dualcast::" #fn, std::forward<A>(a));      \
  }
DUALCAST_DETAIL_LAZY_UNARY(exp)
DUALCAST_DETAIL_LAZY_UNARY(expm1)
DUALCAST_DETAIL_LAZY_UNARY(exp2)
DUALCAST_DETAIL_LAZY_UNARY(log)
DUALCAST_DETAIL_LAZY_UNARY(log1p)
DUALCAST_DETAIL_LAZY_UNARY(log2)
DUALCAST_DETAIL_LAZY_UNARY(log10)
DUALCAST_DETAIL_LAZY_UNARY(sqrt)
DUALCAST_DETAIL_LAZY_UNARY(rsqrt)
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
DUALCAST_DETAIL_LAZY_UNARY(normcdf)
DUALCAST_DETAIL_LAZY_UNARY(abs)
DUALCAST_DETAIL_LAZY_UNARY(relu)
DUALCAST_DETAIL_LAZY_UNARY(sigmoid)
DUALCAST_DETAIL_LAZY_UNARY(softplus)
DUALCAST_DETAIL_LAZY_UNARY(floor) // floor, ceil and round: derivative 0 (round: half to even)
DUALCAST_DETAIL_LAZY_UNARY(ceil)
DUALCAST_DETAIL_LAZY_UNARY(round)
#undef DUALCAST_DETAIL_LAZY_UNARY
} // namespace dualcast
