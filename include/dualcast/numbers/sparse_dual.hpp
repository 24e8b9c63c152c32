// dualcast/numbers/sparse_dual.hpp: dual numbers whose partials are indexed by a compile-time set
// of the inputs they depend on -- the fused kernels' internal number type (see
// kernel/detail/element_ops.hpp, sparse_partials in kernel/kernel.hpp).
//
// sparse_dual<V, index_set<0, 3>> holds a value and the partials with respect to inputs 0 and 3
// only. Input k is seeded with the set {k}; every operation's result carries the union of its
// operands' sets, so sigmoid(i) costs one multiplication however many inputs the kernel has, and
// i * g two (a dense dual<V, N> spends N each: the compiler may not fold 0 * x under IEEE rules).
// Partials outside the set are structurally zero.
//
// Where both operands carry the same set the operation is the dense one on dual<V, n> (same
// operations, same order, same bits). Where the sets differ, a term whose partial is absent is
// left out instead of computed as (coefficient * 0): the result is the same except that a zero
// partial may come out as -0 where the dense sum gives +0, and a term the dense rule would make
// NaN (an infinite coefficient times the absent 0) is 0 -- what the dense path's zero-wins rerun
// gives (numbers/dual.hpp, zero_wins).
//
// A value's set is part of its type, so a variable cannot take values of a set that is not a
// subset of its own: loops accumulating over different inputs, or `if` branches returning values
// of different sets, do not compile with sparse partials -- such kernels keep the dense duals
// (they are the default; kernel/kernel.hpp, sparse_partials, opts a kernel in).
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/numbers/dual.hpp>

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace dualcast {

// A compile-time set of input numbers, ascending.
template <int... I> struct index_set {
  static constexpr int size = sizeof...(I);
  static constexpr int indices[size > 0 ? size : 1] = {I...};
  // The position of input i in the set, -1 when absent.
  static constexpr int position(int i) {
    for (int p = 0; p < size; ++p)
      if (indices[p] == i)
        return p;
    return -1;
  }
};

namespace detail {
// The union of two sets (a merge of two ascending lists).
template <class A, class B> struct set_union;
template <int... I> struct set_union<index_set<I...>, index_set<I...>> {
  using type = index_set<I...>;
};
template <int... I, int... J> struct set_union<index_set<I...>, index_set<J...>> {
  struct merged {
    std::array<int, sizeof...(I) + sizeof...(J)> v{};
    int n = 0;
  };
  static constexpr merged m = [] {
    constexpr int a[] = {I..., 0}, b[] = {J..., 0};
    constexpr int na = int(sizeof...(I)), nb = int(sizeof...(J));
    merged r{};
    int i = 0, j = 0;
    while (i < na || j < nb) {
      int x = 0;
      if (j >= nb || (i < na && a[i] < b[j]))
        x = a[i++];
      else if (i >= na || b[j] < a[i])
        x = b[j++];
      else
        x = a[i++], ++j;
      r.v[std::size_t(r.n++)] = x;
    }
    return r;
  }();
  template <std::size_t... k> static index_set<m.v[k]...> make(std::index_sequence<k...>);
  using type = decltype(make(std::make_index_sequence<std::size_t(m.n)>{}));
};
template <class A, class B> using set_union_t = typename set_union<A, B>::type;

template <class A, class B> constexpr bool is_subset() {
  for (int p = 0; p < A::size; ++p)
    if (B::position(A::indices[p]) < 0)
      return false;
  return true;
}

// f(integral_constant<int, u>) for u = 0 .. n-1, unrolled at compile time.
template <int N, class F> DUALCAST_HD DUALCAST_FORCEINLINE constexpr void for_positions(F &&f) {
  [&]<std::size_t... u>(std::index_sequence<u...>) {
    (f(std::integral_constant<int, int(u)>{}), ...);
  }
  (std::make_index_sequence<std::size_t(N)>{});
}
} // namespace detail

template <class V, class S> struct sparse_dual;

template <class T> struct is_sparse_dual : std::false_type {};
template <class V, class S> struct is_sparse_dual<sparse_dual<V, S>> : std::true_type {};
template <class T>
inline constexpr bool is_sparse_dual_v = is_sparse_dual<std::remove_cvref_t<T>>::value;

template <class V, int... I> struct sparse_dual<V, index_set<I...>> {
  using set = index_set<I...>;
  using value_type = V;
  static constexpr int size = set::size;
  static_assert(size >= 1, "dualcast: a sparse dual depends on at least one input");
  static_assert(!is_dual_v<V>, "dualcast: sparse duals hold plain lanes (nested duals stay dense)");

  dual<V, size> x; // x.d[p]: the partial with respect to input set::indices[p]

  constexpr sparse_dual() = default;
  DUALCAST_HD constexpr explicit sparse_dual(dual<V, size> const &d) : x(d) {}

  // A value of a subset of the inputs (a branch that does not depend on all of them): zeros where
  // absent. A value of other inputs would lose partials: not convertible.
  template <class S2>
  requires(!std::is_same_v<S2, set> && detail::is_subset<S2, set>())
      DUALCAST_HD constexpr sparse_dual(
          sparse_dual<V, S2> const &o) // NOLINT(google-explicit-constructor): sets widen implicitly
      : x(o.x.val) {
    detail::for_positions<S2::size>(
        [&](auto p) { x.d[set::position(S2::indices[decltype(p)::value])] = o.x.d[p]; });
  }
  template <class S2>
  requires(!detail::is_subset<S2, set>()) DUALCAST_HD constexpr sparse_dual(
      sparse_dual<V, S2> const &) { // NOLINT(google-explicit-constructor)
    static_assert(
        detail::is_subset<S2, set>(),
        "dualcast: with sparse partials (dualcast::sparse_partials) a variable only takes "
        "values depending on its own inputs (a loop or branch mixing inputs?): keep this "
        "kernel's dense partials (leave out sparse_partials)");
  }

  DUALCAST_HD constexpr V const &value() const { return x.val; }

  template <class O> DUALCAST_HD constexpr sparse_dual &operator+=(O const &o) {
    return *this = *this + o;
  }
  template <class O> DUALCAST_HD constexpr sparse_dual &operator-=(O const &o) {
    return *this = *this - o;
  }
  template <class O> DUALCAST_HD constexpr sparse_dual &operator*=(O const &o) {
    return *this = *this * o;
  }
  template <class O> DUALCAST_HD constexpr sparse_dual &operator/=(O const &o) {
    return *this = *this / o;
  }

  template <class S>
  requires std::is_arithmetic_v<S> DUALCAST_HD explicit constexpr operator S() const {
    static_assert(sizeof(S) == 0,
                  "dualcast: a dual number cannot be converted to a plain number (its partials "
                  "would be lost): use dualcast::value_of(x) where the value alone is meant");
    return S{};
  }
};

// Input k of a kernel's evaluation, seeded: value v, partial 1 with respect to itself.
template <int K, class V> DUALCAST_HD constexpr sparse_dual<V, index_set<K>> seed(V const &v) {
  sparse_dual<V, index_set<K>> r{dual<V, 1>(v)};
  r.x.d[0] = V(1);
  return r;
}

template <class V, class S> struct scalar_of<sparse_dual<V, S>> : scalar_of<V> {};
template <class V, class S> DUALCAST_HD constexpr auto value_of(sparse_dual<V, S> const &x) {
  return value_of(x.x.val);
}

namespace detail {
template <class X, class V>
concept sparse_constant_for =
    !is_sparse_dual_v<X> && !is_dual_v<X> && std::is_convertible_v<X const &, V>;

// r = value with partials sum_k coef_k * x_k.d over the union of the operands' sets, each sum in
// operand order with absent terms left out (see the header comment). Guarded: a zero factor
// wins (zero_wins), as detail::chain's recomputation.
template <bool Guarded, class V, class SX, class SY>
DUALCAST_HD DUALCAST_FORCEINLINE constexpr auto
sparse_combine(sparse_dual<V, SX> const &x, sparse_dual<V, SY> const &y, V const &value,
               V const &dfdx, V const &dfdy) {
  using U = set_union_t<SX, SY>;
  sparse_dual<V, U> r{dual<V, U::size>(value)};
  for_positions<U::size>([&](auto u) {
    constexpr int i = U::indices[decltype(u)::value];
    constexpr int px = SX::position(i), py = SY::position(i);
    auto term = [&](V const &c, V const &d) {
      if constexpr (Guarded)
        return zero_wins(c, d);
      else
        return c * d;
    };
    if constexpr (px >= 0 && py >= 0)
      r.x.d[u] = term(dfdx, x.x.d[px]) + term(dfdy, y.x.d[py]);
    else if constexpr (px >= 0)
      r.x.d[u] = term(dfdx, x.x.d[px]);
    else
      r.x.d[u] = term(dfdy, y.x.d[py]);
  });
  return r;
}
// The chain rule f(x, y) for operands of different sets (the sparse chain2 of numbers/dual.hpp).
template <class V, class SX, class SY>
DUALCAST_HD constexpr auto sparse_chain2(sparse_dual<V, SX> const &x, sparse_dual<V, SY> const &y,
                                         V const &value, V const &dfdx, V const &dfdy) {
  auto r = sparse_combine<false>(x, y, value, dfdx, dfdy);
  if constexpr (checks_each_step<V>) {
    if (!partials_finite(r.x)) [[unlikely]]
      return sparse_combine<true>(x, y, value, dfdx, dfdy);
  }
  return r;
}
template <class V, class SX, class SY>
DUALCAST_HD constexpr auto sparse_chain2_checked(sparse_dual<V, SX> const &x,
                                                 sparse_dual<V, SY> const &y, V const &value,
                                                 V const &dfdx, V const &dfdy) {
  if constexpr (!checks_each_step<V>) {
    if (!all_finite(dfdx) || !all_finite(dfdy))
      return sparse_combine<true>(x, y, value, dfdx, dfdy);
  }
  return sparse_chain2(x, y, value, dfdx, dfdy);
}
} // namespace detail

// ---- arithmetic: the dense operation where the sets agree, the union where they differ ------
template <class V, class S>
DUALCAST_HD constexpr sparse_dual<V, S> operator+(sparse_dual<V, S> const &x) {
  return x;
}
template <class V, class S>
DUALCAST_HD constexpr sparse_dual<V, S> operator-(sparse_dual<V, S> const &x) {
  return sparse_dual<V, S>(-x.x);
}

template <class V, class SX, class SY>
DUALCAST_HD constexpr auto operator+(sparse_dual<V, SX> const &x, sparse_dual<V, SY> const &y) {
  if constexpr (std::is_same_v<SX, SY>) {
    return sparse_dual<V, SX>(x.x + y.x);
  } else {
    using U = detail::set_union_t<SX, SY>;
    sparse_dual<V, U> r{dual<V, U::size>(x.x.val + y.x.val)};
    detail::for_positions<U::size>([&](auto u) {
      constexpr int px = SX::position(U::indices[decltype(u)::value]),
                    py = SY::position(U::indices[decltype(u)::value]);
      if constexpr (px >= 0 && py >= 0)
        r.x.d[u] = x.x.d[px] + y.x.d[py];
      else if constexpr (px >= 0)
        r.x.d[u] = x.x.d[px];
      else
        r.x.d[u] = y.x.d[py];
    });
    return r;
  }
}
template <class V, class SX, class SY>
DUALCAST_HD constexpr auto operator-(sparse_dual<V, SX> const &x, sparse_dual<V, SY> const &y) {
  if constexpr (std::is_same_v<SX, SY>) {
    return sparse_dual<V, SX>(x.x - y.x);
  } else {
    using U = detail::set_union_t<SX, SY>;
    sparse_dual<V, U> r{dual<V, U::size>(x.x.val - y.x.val)};
    detail::for_positions<U::size>([&](auto u) {
      constexpr int px = SX::position(U::indices[decltype(u)::value]),
                    py = SY::position(U::indices[decltype(u)::value]);
      if constexpr (px >= 0 && py >= 0)
        r.x.d[u] = x.x.d[px] - y.x.d[py];
      else if constexpr (px >= 0)
        r.x.d[u] = x.x.d[px];
      else
        r.x.d[u] = -y.x.d[py];
    });
    return r;
  }
}
template <class V, class SX, class SY>
DUALCAST_HD constexpr auto operator*(sparse_dual<V, SX> const &x, sparse_dual<V, SY> const &y) {
  if constexpr (std::is_same_v<SX, SY>)
    return sparse_dual<V, SX>(x.x * y.x);
  else
    return detail::sparse_chain2(x, y, x.x.val * y.x.val, y.x.val, x.x.val);
}
template <class V, class SX, class SY>
DUALCAST_HD constexpr auto operator/(sparse_dual<V, SX> const &x, sparse_dual<V, SY> const &y) {
  if constexpr (std::is_same_v<SX, SY>) {
    return sparse_dual<V, SX>(x.x / y.x);
  } else {
    using U = detail::set_union_t<SX, SY>;
    V inv = V(1) / y.x.val;
    V q = x.x.val / y.x.val; // as dense division: see numbers/dual.hpp
    sparse_dual<V, U> r{dual<V, U::size>(q)};
    detail::for_positions<U::size>([&](auto u) {
      constexpr int px = SX::position(U::indices[decltype(u)::value]),
                    py = SY::position(U::indices[decltype(u)::value]);
      if constexpr (px >= 0 && py >= 0)
        r.x.d[u] = (x.x.d[px] - q * y.x.d[py]) * inv;
      else if constexpr (px >= 0)
        r.x.d[u] = x.x.d[px] * inv;
      else
        r.x.d[u] = (-(q * y.x.d[py])) * inv;
    });
    if constexpr (detail::checks_each_step<V>) {
      if (!detail::partials_finite(r.x)) [[unlikely]]
        return detail::sparse_chain2(x, y, q, inv, -q * inv);
    } else {
      if (!detail::all_finite(inv) || !detail::all_finite(q))
        return detail::sparse_chain2_checked(x, y, q, inv, -q * inv);
    }
    return r;
  }
}

// With constants: the dense operation on the partials present.
#define DUALCAST_DETAIL_SPARSE_CONSTANT_OP(op)                                                     \
  template <class V, class S, class C>                                                             \
  requires detail::sparse_constant_for<C, V> DUALCAST_HD constexpr sparse_dual<V, S> operator op(  \
      sparse_dual<V, S> const &x, C const &c) {                                                    \
    return sparse_dual<V, S>(x.x op c);                                                            \
  }                                                                                                \
  template <class V, class S, class C>                                                             \
  requires detail::sparse_constant_for<C, V> DUALCAST_HD constexpr sparse_dual<V, S> operator op(  \
      C const &c, sparse_dual<V, S> const &x) {                                                    \
    return sparse_dual<V, S>(c op x.x);                                                            \
  }
DUALCAST_DETAIL_SPARSE_CONSTANT_OP(+)
DUALCAST_DETAIL_SPARSE_CONSTANT_OP(-)
DUALCAST_DETAIL_SPARSE_CONSTANT_OP(*)
DUALCAST_DETAIL_SPARSE_CONSTANT_OP(/)
#undef DUALCAST_DETAIL_SPARSE_CONSTANT_OP

// ---- comparisons: on values only -------------------------------------------------------------
namespace detail {
template <class X> DUALCAST_HD constexpr auto const &sparse_primal(X const &x) {
  if constexpr (is_sparse_dual_v<X>)
    return x.x.val;
  else
    return x;
}
} // namespace detail
#define DUALCAST_DETAIL_SPARSE_COMPARE(op)                                                         \
  template <class V, class SX, class SY>                                                           \
  DUALCAST_HD constexpr auto operator op(sparse_dual<V, SX> const &x,                              \
                                         sparse_dual<V, SY> const &y) {                            \
    return x.x.val op y.x.val;                                                                     \
  }                                                                                                \
  template <class V, class S, class C>                                                             \
  requires detail::sparse_constant_for<C, V> DUALCAST_HD constexpr auto operator op(               \
      sparse_dual<V, S> const &x, C const &c) {                                                    \
    return x.x.val op V(c);                                                                        \
  }                                                                                                \
  template <class V, class S, class C>                                                             \
  requires detail::sparse_constant_for<C, V> DUALCAST_HD constexpr auto operator op(               \
      C const &c, sparse_dual<V, S> const &x) {                                                    \
    return V(c) op x.x.val;                                                                        \
  }
DUALCAST_DETAIL_SPARSE_COMPARE(<)
DUALCAST_DETAIL_SPARSE_COMPARE(<=)
DUALCAST_DETAIL_SPARSE_COMPARE(>)
DUALCAST_DETAIL_SPARSE_COMPARE(>=)
DUALCAST_DETAIL_SPARSE_COMPARE(==)
DUALCAST_DETAIL_SPARSE_COMPARE(!=)
#undef DUALCAST_DETAIL_SPARSE_COMPARE

} // namespace dualcast
