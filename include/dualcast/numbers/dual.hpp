// dualcast/numbers/dual.hpp: dual numbers dual<T, N> = a value and N partial derivatives.
//
// T may be float, double, a SIMD batch (dualcast/numbers/simd.hpp) or another dual (nesting gives
// higher derivatives). Storage is fixed (no heap), the type is trivially copyable and works
// in host and device code. Comparisons compare values only, so a lambda that branches on a
// value takes the same branch on plain numbers and on duals.
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/numbers/float16.hpp>

#include <type_traits>

namespace dualcast {

template <class T, int N> struct dual;

template <class T> struct is_dual : std::false_type {};
template <class T, int N> struct is_dual<dual<T, N>> : std::true_type {};
template <class T> inline constexpr bool is_dual_v = is_dual<std::remove_cvref_t<T>>::value;

namespace detail {
// A "scalar for T": something that mixes with dual<T, N> as a constant (zero partials).
template <class S, class T, int N>
concept scalar_for = !std::is_same_v<std::remove_cvref_t<S>, dual<T, N>> && !is_dual_v<S> &&
                     std::is_convertible_v<S const &, T>;
// Nested duals: dual<dual<U, M>, N> also accepts dual<U, M> as a constant.
template <class S, class T, int N>
concept constant_for = scalar_for<S, T, N> ||
    (is_dual_v<S> &&std::is_same_v<std::remove_cvref_t<S>, T>);
} // namespace detail

template <class T, int N> struct dual {
  static_assert(N >= 1, "dualcast: dual<T, N> needs at least one partial (N >= 1)");
  static_assert(!std::is_reference_v<T> && !std::is_const_v<T>,
                "dualcast: dual<T, N> needs a plain value type T");
  using value_type = T;
  static constexpr int size = N;

  T val{};
  T d[N]{};

  constexpr dual() = default;
  DUALCAST_HD constexpr dual(T v)
      : val(v) {} // NOLINT(google-explicit-constructor): constants mix with duals
  template <class S>
  requires(std::is_arithmetic_v<S> && !std::is_same_v<S, T>) DUALCAST_HD constexpr dual(S v)
      : val(static_cast<T>(v)) {} // NOLINT(google-explicit-constructor)

  // A value seeded as the i-th independent variable (partial i is one).
  DUALCAST_HD static constexpr dual variable(T v, int i) {
    dual r(v);
    r.d[i] = T(1);
    return r;
  }

  DUALCAST_HD constexpr dual &operator+=(dual const &o) { return *this = *this + o; }
  DUALCAST_HD constexpr dual &operator-=(dual const &o) { return *this = *this - o; }
  DUALCAST_HD constexpr dual &operator*=(dual const &o) { return *this = *this * o; }
  DUALCAST_HD constexpr dual &operator/=(dual const &o) { return *this = *this / o; }

  // A dual does not convert to a plain number: that would drop its partials silently.
  template <class S>
  requires std::is_arithmetic_v<S> DUALCAST_HD explicit constexpr operator S() const {
    static_assert(sizeof(S) == 0,
                  "dualcast: a dual number cannot be converted to a plain number (its partials "
                  "would be lost): use dualcast::value_of(x) where the value alone is meant");
    return S{};
  }
};

// ---- traits -------------------------------------------------------------------------------
// The innermost value type (float for dual<dual<float, 2>, 3>).
template <class T> struct scalar_of { using type = T; };
template <class T, int N> struct scalar_of<dual<T, N>> : scalar_of<T> {};
// 16-bit storage computes in float (a scalar beside bfloat16 / half arrays is a float).
template <> struct scalar_of<bfloat16> { using type = float; };
template <> struct scalar_of<half> { using type = float; };
template <class T> using scalar_of_t = typename scalar_of<std::remove_cvref_t<T>>::type;

// The innermost value (drops all partials); plain numbers pass through.
template <class T> DUALCAST_HD constexpr auto value_of(T const &x) {
  if constexpr (is_dual_v<T>)
    return value_of(x.val);
  else
    return x;
}

namespace detail {
// c ? a : b per lane: a ternary on plain numbers; on SIMD batches their select, found by
// argument-dependent lookup (math/simd.hpp), so that this header needs no math library.
template <class C, class T> DUALCAST_HD constexpr T pick(C const &c, T const &a, T const &b) {
  if constexpr (std::is_same_v<C, bool>)
    return c ? a : b;
  else
    return select(c, a, b);
}

// Whether every lane of v is finite (v - v is 0 only for finite v); nested duals count as finite.
template <class T> DUALCAST_HD constexpr bool all_finite(T const &v) {
  if constexpr (is_dual_v<T>) {
    return true;
  } else {
    auto m = (v - v) == T(0); // NOLINT(misc-redundant-expression): 0 unless inf or NaN
    if constexpr (std::is_same_v<decltype(m), bool>)
      return m;
    else
      return m.all();
  }
}

// Whether every partial of r is finite: one test of their sum (a NaN or an inf in any partial
// makes it non-finite; a false alarm from an overflowing sum only costs the guarded path).
template <class T, int N> DUALCAST_HD constexpr bool partials_finite(dual<T, N> const &r) {
  if constexpr (N == 0 || is_dual_v<T>) {
    return true;
  } else {
    T s = r.d[0];
    for (int i = 1; i < N; ++i)
      s += r.d[i];
    return all_finite(s);
  }
}

// a * b where a zero factor wins: 0 * inf and 0 * NaN are 0. The unfused tape contracts node by
// node with this rule, so the chain rule on dual numbers follows it too: a gradient must not
// depend on how a program is fused (d/dx tanh(log(x)) at 0 is 0 both ways, not NaN fused).
template <class T> DUALCAST_HD constexpr T zero_wins(T const &a, T const &b) {
  return pick(a == T(0) || b == T(0), T(0), a * b);
}

// Where the zero-wins rule is applied. On plain numbers (the GPU, scalar code, the CPU's slow
// lane-by-lane path) every chain-rule step runs the plain products, tests their sum, and
// recomputes them zero-wins only where a partial came out non-finite (rare: log or sqrt at 0,
// overflow, NaN inputs). On SIMD batches (the CPU's hot path) that test would cost as much as the
// products themselves, so a step only guards a non-finite derivative of its own (the _checked
// forms: sqrt, log, division...), and the fused kernels test each result's partials once and
// re-run a batch whose partials are not all finite lane by lane on plain numbers
// (kernel/detail/element_ops.hpp): the same results, one test per kernel instead of one per step.
template <class T> inline constexpr bool checks_each_step = std::is_arithmetic_v<T>;

// The partials of chain and chain2 recomputed zero-wins, for a step whose plain products came out
// non-finite (DUALCAST_KEEP_BRANCH: the common step costs the products and one test).
template <class T, int N>
DUALCAST_HD constexpr void chain_zero_wins(dual<T, N> &r, dual<T, N> const &x, T const &deriv) {
  DUALCAST_KEEP_BRANCH();
  for (int i = 0; i < N; ++i)
    r.d[i] = zero_wins(deriv, x.d[i]);
}
template <class T, int N>
DUALCAST_HD constexpr void chain2_zero_wins(dual<T, N> &r, dual<T, N> const &x, dual<T, N> const &y,
                                            T const &dfdx, T const &dfdy) {
  DUALCAST_KEEP_BRANCH();
  for (int i = 0; i < N; ++i)
    r.d[i] = zero_wins(dfdx, x.d[i]) + zero_wins(dfdy, y.d[i]);
}

// The chain rule: f(x) from the value f(x.val) and the derivative f'(x.val).
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> chain(dual<T, N> const &x, T const &value, T const &deriv) {
  dual<T, N> r(value);
  for (int i = 0; i < N; ++i)
    r.d[i] = deriv * x.d[i];
  if constexpr (checks_each_step<T>) {
    if (!partials_finite(r)) [[unlikely]]
      chain_zero_wins(r, x, deriv);
  }
  return r;
}
// f(x, y) from the value and both partials.
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> chain2(dual<T, N> const &x, dual<T, N> const &y, T const &value,
                                        T const &dfdx, T const &dfdy) {
  dual<T, N> r(value);
  for (int i = 0; i < N; ++i)
    r.d[i] = dfdx * x.d[i] + dfdy * y.d[i];
  if constexpr (checks_each_step<T>) {
    if (!partials_finite(r)) [[unlikely]]
      chain2_zero_wins(r, x, y, dfdx, dfdy);
  }
  return r;
}
// A quotient's partials by chain2, which retests them (y == 0, overflow, NaN; a branch kept, as
// chain_zero_wins's).
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> quotient_rechained(dual<T, N> const &x, dual<T, N> const &y,
                                                    T const &q, T const &inv) {
  DUALCAST_KEEP_BRANCH();
  return chain2(x, y, q, inv, -q * inv);
}
// The chain rule for functions whose derivative is infinite somewhere in their domain (sqrt at 0,
// log at 0, asin at 1, x / y at y = 0...): on SIMD batches too, a partial with respect to an input
// the argument does not depend on stays 0 there (d/dy of sqrt(x) + y at x = 0 is 1), tested once
// per call on the derivative. (Nested duals keep the plain rule: their inner partials can be
// non-zero where the value is 0.)
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> chain_checked(dual<T, N> const &x, T const &value,
                                               T const &deriv) {
  if constexpr (!is_dual_v<T> && !checks_each_step<T>) {
    if (!all_finite(deriv)) {
      dual<T, N> r(value);
      for (int i = 0; i < N; ++i)
        r.d[i] = zero_wins(deriv, x.d[i]);
      return r;
    }
  }
  return chain(x, value, deriv);
}
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> chain2_checked(dual<T, N> const &x, dual<T, N> const &y,
                                                T const &value, T const &dfdx, T const &dfdy) {
  if constexpr (!is_dual_v<T> && !checks_each_step<T>) {
    if (!all_finite(dfdx) || !all_finite(dfdy)) {
      dual<T, N> r(value);
      for (int i = 0; i < N; ++i)
        r.d[i] = zero_wins(dfdx, x.d[i]) + zero_wins(dfdy, y.d[i]);
      return r;
    }
  }
  return chain2(x, y, value, dfdx, dfdy);
}
} // namespace detail

// ---- width mismatch gives a readable error ------------------------------------------------
#define DUALCAST_DETAIL_WIDTH_CHECK(op)                                                            \
  template <class T, int N, int M>                                                                 \
  requires(N != M) DUALCAST_HD constexpr dual<T, N> operator op(dual<T, N> const &,                \
                                                                dual<T, M> const &) {              \
    static_assert(N == M,                                                                          \
                  "dualcast: cannot combine duals of different widths (dual<T, N> with dual<T, "   \
                  "M>, N != M)");                                                                  \
    return {};                                                                                     \
  }
DUALCAST_DETAIL_WIDTH_CHECK(+)
DUALCAST_DETAIL_WIDTH_CHECK(-)
DUALCAST_DETAIL_WIDTH_CHECK(*)
DUALCAST_DETAIL_WIDTH_CHECK(/)
#undef DUALCAST_DETAIL_WIDTH_CHECK

// ---- arithmetic ---------------------------------------------------------------------------
template <class T, int N> DUALCAST_HD constexpr dual<T, N> operator+(dual<T, N> const &x) {
  return x;
}
template <class T, int N> DUALCAST_HD constexpr dual<T, N> operator-(dual<T, N> const &x) {
  dual<T, N> r(-x.val);
  for (int i = 0; i < N; ++i)
    r.d[i] = -x.d[i];
  return r;
}

template <class T, int N>
DUALCAST_HD constexpr dual<T, N> operator+(dual<T, N> const &x, dual<T, N> const &y) {
  dual<T, N> r(x.val + y.val);
  for (int i = 0; i < N; ++i)
    r.d[i] = x.d[i] + y.d[i];
  return r;
}
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> operator-(dual<T, N> const &x, dual<T, N> const &y) {
  dual<T, N> r(x.val - y.val);
  for (int i = 0; i < N; ++i)
    r.d[i] = x.d[i] - y.d[i];
  return r;
}
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> operator*(dual<T, N> const &x, dual<T, N> const &y) {
  return detail::chain2(x, y, x.val * y.val, y.val, x.val);
}
template <class T, int N>
DUALCAST_HD constexpr dual<T, N> operator/(dual<T, N> const &x, dual<T, N> const &y) {
  T inv = T(1) / y.val;
  T q = x.val / y.val; // the value rounds like plain division; inv serves the partials
  dual<T, N> r(q);
  for (int i = 0; i < N; ++i)
    r.d[i] = (x.d[i] - q * y.d[i]) * inv;
  if constexpr (detail::checks_each_step<T>) {
    if (!detail::partials_finite(r)) [[unlikely]] // y == 0, overflow, NaN: see detail::chain
      return detail::quotient_rechained(x, y, q, inv);
  } else if constexpr (!is_dual_v<T>) {
    if (!detail::all_finite(inv) || !detail::all_finite(q)) // y == 0: see chain_checked
      return detail::chain2_checked(x, y, q, inv, -q * inv);
  }
  return r;
}

// With constants (a constant has zero partials, so no multiplication by zero is spent).
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator+(dual<T, N> const &x, S const &s) {
  dual<T, N> r = x;
  r.val = x.val + T(s);
  return r;
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator+(S const &s, dual<T, N> const &x) {
  dual<T, N> r = x;
  r.val = T(s) + x.val;
  return r;
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator-(dual<T, N> const &x, S const &s) {
  dual<T, N> r = x;
  r.val = x.val - T(s);
  return r;
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator-(S const &s, dual<T, N> const &x) {
  dual<T, N> r = -x;
  r.val = T(s) - x.val;
  return r;
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator*(dual<T, N> const &x, S const &s) {
  T c(s);
  return detail::chain(x, x.val * c, c);
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator*(S const &s, dual<T, N> const &x) {
  T c(s);
  return detail::chain(x, c * x.val, c);
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator/(dual<T, N> const &x, S const &s) {
  T inv = T(1) / T(s);
  return detail::chain(x, x.val * inv, inv);
}
template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator/(S const &s, dual<T, N> const &x);

namespace detail {
// c / y for a real constant c: on a nested dual through the constant's own overload (one division
// at each level; converted to the inner dual, c went through dual / dual, which divides twice and
// multiplies c's zero partials).
template <class T, class C> DUALCAST_HD constexpr T over(C c, T const &y) {
  if constexpr (is_dual_v<T>)
    return scalar_of_t<T>(c) / y;
  else
    return T(c) / y;
}
// s * y for a constant s (a plain number multiplies a nested dual as a constant: no zero partials
// multiplied).
template <class T, class S> DUALCAST_HD constexpr T times_constant(S const &s, T const &y) {
  if constexpr (is_dual_v<T> && std::is_arithmetic_v<S>)
    return scalar_of_t<T>(s) * y;
  else
    return T(s) * y;
}
} // namespace detail

template <class T, int N, class S>
requires detail::constant_for<S, T, N> DUALCAST_HD constexpr dual<T, N>
operator/(S const &s, dual<T, N> const &x) {
  T inv = detail::over(1, x.val);
  T q = detail::times_constant(s, inv);
  return detail::chain_checked(x, q, -q * inv);
}

// ---- comparisons: on values only -----------------------------------------------------------
namespace detail {
template <class X> DUALCAST_HD constexpr auto const &primal(X const &x) {
  if constexpr (is_dual_v<X>)
    return x.val;
  else
    return x;
}
} // namespace detail

#define DUALCAST_DETAIL_COMPARE(op)                                                                \
  template <class T, int N>                                                                        \
  DUALCAST_HD constexpr auto operator op(dual<T, N> const &x, dual<T, N> const &y) {               \
    return x.val op y.val;                                                                         \
  }                                                                                                \
  template <class T, int N, class S>                                                               \
  requires detail::constant_for<S, T, N> DUALCAST_HD constexpr auto operator op(                   \
      dual<T, N> const &x, S const &s) {                                                           \
    return x.val op T(s);                                                                          \
  }                                                                                                \
  template <class T, int N, class S>                                                               \
  requires detail::constant_for<S, T, N> DUALCAST_HD constexpr auto operator op(                   \
      S const &s, dual<T, N> const &x) {                                                           \
    return T(s) op x.val;                                                                          \
  }
DUALCAST_DETAIL_COMPARE(<)
DUALCAST_DETAIL_COMPARE(<=)
DUALCAST_DETAIL_COMPARE(>)
DUALCAST_DETAIL_COMPARE(>=)
DUALCAST_DETAIL_COMPARE(==)
DUALCAST_DETAIL_COMPARE(!=)
#undef DUALCAST_DETAIL_COMPARE

} // namespace dualcast
