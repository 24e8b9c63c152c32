// dualcast/math/sparse_dual.hpp: the elementwise math library on sparse duals
// (numbers/sparse_dual.hpp).
//
// A function of one argument keeps its argument's set and is the dense function (math/dual.hpp)
// on the partials present: the same derivative, the same operations, the same bits. A function of
// several arguments of the same set is the dense one too; of different sets, its partials are
// taken over the union, each computed from the operands that have it.
#pragma once

#include <dualcast/math/dual.hpp>
#include <dualcast/numbers/sparse_dual.hpp>

namespace dualcast {

// ---- functions of one argument: the dense function on the partials present ------------------
#define DUALCAST_DETAIL_SPARSE_UNARY(f)                                                            \
  template <class V, class S>                                                                      \
  DUALCAST_HD DUALCAST_MATH_INLINE sparse_dual<V, S> f(sparse_dual<V, S> const &x) {               \
    return sparse_dual<V, S>(f(x.x));                                                              \
  }
DUALCAST_DETAIL_SPARSE_UNARY(exp)
DUALCAST_DETAIL_SPARSE_UNARY(expm1)
DUALCAST_DETAIL_SPARSE_UNARY(exp2)
DUALCAST_DETAIL_SPARSE_UNARY(log)
DUALCAST_DETAIL_SPARSE_UNARY(log1p)
DUALCAST_DETAIL_SPARSE_UNARY(log2)
DUALCAST_DETAIL_SPARSE_UNARY(log10)
DUALCAST_DETAIL_SPARSE_UNARY(sqrt)
DUALCAST_DETAIL_SPARSE_UNARY(rsqrt)
DUALCAST_DETAIL_SPARSE_UNARY(cbrt)
DUALCAST_DETAIL_SPARSE_UNARY(sin)
DUALCAST_DETAIL_SPARSE_UNARY(cos)
DUALCAST_DETAIL_SPARSE_UNARY(tan)
DUALCAST_DETAIL_SPARSE_UNARY(asin)
DUALCAST_DETAIL_SPARSE_UNARY(acos)
DUALCAST_DETAIL_SPARSE_UNARY(atan)
DUALCAST_DETAIL_SPARSE_UNARY(sinh)
DUALCAST_DETAIL_SPARSE_UNARY(cosh)
DUALCAST_DETAIL_SPARSE_UNARY(tanh)
DUALCAST_DETAIL_SPARSE_UNARY(asinh)
DUALCAST_DETAIL_SPARSE_UNARY(acosh)
DUALCAST_DETAIL_SPARSE_UNARY(atanh)
DUALCAST_DETAIL_SPARSE_UNARY(erf)
DUALCAST_DETAIL_SPARSE_UNARY(erfc)
DUALCAST_DETAIL_SPARSE_UNARY(normcdf)
DUALCAST_DETAIL_SPARSE_UNARY(abs)
DUALCAST_DETAIL_SPARSE_UNARY(relu)
DUALCAST_DETAIL_SPARSE_UNARY(floor)
DUALCAST_DETAIL_SPARSE_UNARY(ceil)
DUALCAST_DETAIL_SPARSE_UNARY(round)
DUALCAST_DETAIL_SPARSE_UNARY(sigmoid)
DUALCAST_DETAIL_SPARSE_UNARY(softplus)
#undef DUALCAST_DETAIL_SPARSE_UNARY

// ---- powers --------------------------------------------------------------------------------
template <class V, class S, class C>
requires detail::sparse_constant_for<C, V> DUALCAST_HD sparse_dual<V, S>
pow(sparse_dual<V, S> const &x, C const &c) {
  return sparse_dual<V, S>(pow(x.x, c));
}
template <class V, class S, class C>
requires detail::sparse_constant_for<C, V> DUALCAST_HD sparse_dual<V, S>
pow(C const &c, sparse_dual<V, S> const &y) {
  return sparse_dual<V, S>(pow(c, y.x));
}
template <class V, class SX, class SY>
DUALCAST_HD auto pow(sparse_dual<V, SX> const &x, sparse_dual<V, SY> const &y) {
  if constexpr (std::is_same_v<SX, SY>) {
    return sparse_dual<V, SX>(pow(x.x, y.x));
  } else { // the derivatives of math/dual.hpp's pow
    V const &a = x.x.val, &b = y.x.val;
    V p = pow(a, b);
    V dx = select(b == V(0), V(0), b * pow(a, b - V(1)));
    V dy = select(a == V(0) && b >= V(0), V(0), p * log(a));
    return detail::sparse_chain2_checked(x, y, p, dx, dy);
  }
}

// ---- functions of two arguments -------------------------------------------------------------
// f(a, b): the dense f where the sets agree or one argument is a constant, else `partials(a, b)`
// gives f's value and its two derivatives at the values (as math/dual.hpp computes them).
namespace detail {
template <class A, class B>
concept sparse_args = (is_sparse_dual_v<A> || is_sparse_dual_v<B>);

template <class A, class B, class Dense, class Partials>
DUALCAST_HD DUALCAST_FORCEINLINE auto sparse_binary(A const &a, B const &b, Dense const &dense,
                                                    Partials const &partials) {
  if constexpr (is_sparse_dual_v<A> && is_sparse_dual_v<B>) {
    if constexpr (std::is_same_v<typename A::set, typename B::set>) {
      return A(dense(a.x, b.x));
    } else {
      auto [v, da, db] = partials(a.x.val, b.x.val);
      return sparse_chain2(a, b, v, da, db);
    }
  } else if constexpr (is_sparse_dual_v<A>) {
    return A(dense(a.x, b));
  } else {
    return B(dense(a, b.x));
  }
}
template <class V> struct value_and_partials { V v, da, db; };
} // namespace detail

template <class A, class B>
requires detail::sparse_args<A, B> DUALCAST_HD auto atan2(A const &ya, B const &xa) {
  return detail::sparse_binary(
      ya, xa, [](auto const &y, auto const &x) { return atan2(y, x); },
      [](auto const &y, auto const &x) {
        using V = std::remove_cvref_t<decltype(y)>;
        V inv = V(1) / (x * x + y * y);
        return detail::value_and_partials<V>{atan2(y, x), x * inv, -y * inv};
      });
}
template <class A, class B>
requires detail::sparse_args<A, B> DUALCAST_HD auto hypot(A const &xa, B const &ya) {
  return detail::sparse_binary(
      xa, ya, [](auto const &x, auto const &y) { return hypot(x, y); },
      [](auto const &x, auto const &y) {
        using V = std::remove_cvref_t<decltype(x)>;
        V h = hypot(x, y);
        V inv = select(h == V(0), V(0), V(1) / h);
        return detail::value_and_partials<V>{h, x * inv, y * inv};
      });
}
template <class A, class B>
requires detail::sparse_args<A, B> DUALCAST_HD auto max(A const &aa, B const &ba) {
  return detail::sparse_binary(
      aa, ba, [](auto const &a, auto const &b) { return max(a, b); },
      [](auto const &a, auto const &b) {
        using V = std::remove_cvref_t<decltype(a)>;
        V wa = select(a > b, V(1), select(a < b, V(0), V(0.5)));
        return detail::value_and_partials<V>{max(a, b), wa, V(1) - wa};
      });
}
template <class A, class B>
requires detail::sparse_args<A, B> DUALCAST_HD auto min(A const &aa, B const &ba) {
  return detail::sparse_binary(
      aa, ba, [](auto const &a, auto const &b) { return min(a, b); },
      [](auto const &a, auto const &b) {
        using V = std::remove_cvref_t<decltype(a)>;
        V wa = select(a < b, V(1), select(a > b, V(0), V(0.5)));
        return detail::value_and_partials<V>{min(a, b), wa, V(1) - wa};
      });
}

// ---- selection ---------------------------------------------------------------------------
// c ? a : b per lane over the union of the sets; a partial one side lacks is 0 on that side.
template <class C, class A, class B>
requires detail::sparse_args<A, B> DUALCAST_HD constexpr auto select(C const &c, A const &a,
                                                                     B const &b) {
  if constexpr (is_sparse_dual_v<A> && is_sparse_dual_v<B>) {
    using SA = typename A::set;
    using SB = typename B::set;
    using V = typename A::value_type;
    if constexpr (std::is_same_v<SA, SB>) {
      return A(select(c, a.x, b.x));
    } else {
      using U = detail::set_union_t<SA, SB>;
      sparse_dual<V, U> r{dual<V, U::size>(select(c, a.x.val, b.x.val))};
      detail::for_positions<U::size>([&](auto u) {
        constexpr int i = U::indices[decltype(u)::value];
        constexpr int pa = SA::position(i), pb = SB::position(i);
        if constexpr (pa >= 0 && pb >= 0)
          r.x.d[u] = select(c, a.x.d[pa], b.x.d[pb]);
        else if constexpr (pa >= 0)
          r.x.d[u] = select(c, a.x.d[pa], V(0));
        else
          r.x.d[u] = select(c, V(0), b.x.d[pb]);
      });
      return r;
    }
  } else if constexpr (is_sparse_dual_v<A>) {
    return A(select(c, a.x, b));
  } else {
    return B(select(c, a, b.x));
  }
}

template <class X, class L, class H>
requires(is_sparse_dual_v<X> || is_sparse_dual_v<L> || is_sparse_dual_v<H>)
    DUALCAST_HD auto clamp(X const &x, L const &lo, H const &hi) {
  auto const &xv = detail::sparse_primal(x);
  return select(xv < detail::sparse_primal(lo), lo, select(xv > detail::sparse_primal(hi), hi, x));
}

// fma(a, b, c): the dense fma where the sets agree, else a * b + c's partials over the union.
template <class A, class B, class C>
requires(is_sparse_dual_v<A> || is_sparse_dual_v<B> || is_sparse_dual_v<C>)
    DUALCAST_HD auto fma(A const &a, B const &b, C const &c) {
  constexpr bool sa = is_sparse_dual_v<A>, sb = is_sparse_dual_v<B>, sc = is_sparse_dual_v<C>;
  if constexpr (sa && sb && sc && std::is_same_v<typename A::set, typename B::set> &&
                std::is_same_v<typename A::set, typename C::set>) {
    return A(fma(a.x, b.x, c.x));
  } else {
    // Different sets: the partials of a * b + c over the unions (in the dense order), the value
    // fused as fma's.
    auto r = a * b + c;
    using V = typename decltype(r)::value_type;
    r.x.val =
        fma(V(detail::sparse_primal(a)), V(detail::sparse_primal(b)), V(detail::sparse_primal(c)));
    return r;
  }
}

} // namespace dualcast
