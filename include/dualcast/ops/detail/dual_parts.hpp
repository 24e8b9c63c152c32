// dualcast/ops/detail/dual_parts.hpp: a tensor of dual numbers taken apart into plain tensors (its
// value and each partial) and put together again, for the operations of a tape over duals
// (docs/higher-order.md) that run the plain tape's own code on each part: linear operations (sum:
// the sum of the parts), matmul (the products of the parts), and the real-valued kernels whose
// bits the values must share with the plain tape.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/numbers/dual.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/dual_elements.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace dualcast::detail {

// A tape over duals holds dual<float, K> or dual<double, K> elements (not nested duals: the fused
// kernels nest one level more themselves).
template <class T>
inline constexpr bool
    tape_dual_v = is_dual_v<T> &&
                  (std::is_same_v<scalar_of_t<T>, float> ||
                   std::is_same_v<scalar_of_t<T>, double>)&&!is_dual_v<typename T::value_type>;
// Whether any of A is a variable or tensor of dual elements (A... the arguments of an operation).
template <class A> struct holds_duals : std::false_type {};
template <class T> struct holds_duals<var<T>> : std::bool_constant<is_dual_v<T>> {};
template <class T> struct holds_duals<tensor<T>> : std::bool_constant<is_dual_v<T>> {};
template <class... A>
inline constexpr bool any_duals_v = (holds_duals<std::remove_cvref_t<A>>::value || ...);

template <class D> using real_part_t = typename D::value_type;
// Whether a dual<T, K> is laid out as its value followed by its K partials, packed (what reading
// a dual array's parts in place, with strides, relies on).
template <class D>
inline constexpr bool packed_dual_v =
    sizeof(D) == sizeof(real_part_t<D>) * (D::size + 1) && std::is_standard_layout_v<D>;

// Part c (0: the value, 1 + k: partial k) of x's elements read in place, as a plain view with
// x's shape and K + 1 times its strides (a broadcast dimension keeps stride 0): what the fused
// node's SIMD passes read and write instead of splitting the dual arrays into part tensors and
// joining them again (for the D-LSTM's 14-element arrays, the tensors' allocations and reference
// counts cost more than the copies). The passes read each element by the same instructions
// wherever it lies, so the values keep the plain tape's bits.
template <class D, class E> view<E> dual_part_view(view<D> const &v, int c) {
  static_assert(packed_dual_v<std::remove_cv_t<D>>,
                "dualcast: a dual number is its value followed by its partials, packed");
  index_t st[max_rank > 0 ? max_rank : 1];
  for (int i = 0; i < v.rank(); ++i)
    st[i] = v.stride(i) * index_t(D::size + 1);
  return view<E>(reinterpret_cast<E *>(v.data()) + c, v.dims(), static_cast<index_t const *>(st));
}
template <class D> view<real_part_t<D> const> part_view(tensor<D> const &x, int c) {
  return dual_part_view<D const, real_part_t<D> const>(x.cview(), c);
}
// The same, writable, of a tensor the caller has just allocated (no version bump).
template <class D> view<real_part_t<D>> part_raw_view(tensor<D> const &x, int c) {
  return dual_part_view<D, real_part_t<D>>(x.raw_view(), c);
}
// Part c (-1: the value, k >= 0: partial k) of a dual tensor, as a contiguous plain tensor.
template <class D> tensor<real_part_t<D>> dual_component(tensor<D> const &x, int c) {
  dual_host_only("dualcast (a tape over duals)", x.dev());
  auto r = tensor<real_part_t<D>>::empty(x.dims(), x.dev());
  each_element(
      x.dims(), [c](real_part_t<D> &y, D const &v) { y = dual_part(v, c); }, r.raw_view(),
      x.cview());
  return r;
}
// The axes of x by decreasing stride (x.permuted(order) is contiguous when x is a permutation of
// a dense array: a transposed matrix, say), and the inverse permutation.
struct dense_order {
  std::vector<int> order, inverse;
};
template <class D> dense_order dense_order_of(tensor<D> const &x) {
  dense_order o{std::vector<int>(std::size_t(x.rank())), std::vector<int>(std::size_t(x.rank()))};
  for (int i = 0; i < x.rank(); ++i)
    o.order[std::size_t(i)] = i;
  std::stable_sort(o.order.begin(), o.order.end(),
                   [&](int i, int j) { return x.stride(i) > x.stride(j); });
  for (std::size_t i = 0; i < o.order.size(); ++i)
    o.inverse[std::size_t(o.order[i])] = int(i);
  return o;
}
// The same laid out as x when x is a permutation of a dense array, so that a gemm of the parts
// sees the layout (and transpose flags) the plain tape's gemm sees.
template <class D> tensor<real_part_t<D>> dual_component_like(tensor<D> const &x, int c) {
  dense_order const o = dense_order_of(x);
  tensor<D> xp = x.permuted(o.order);
  if (!xp.is_contiguous())
    return dual_component(x, c);
  return dual_component(xp, c).permuted(o.inverse);
}
// Writes p (x's shape) into part c of x (a fresh result: no version bump).
template <class D>
void set_dual_component(tensor<D> const &x, int c, tensor<real_part_t<D>> const &p) {
  each_element(
      x.dims(), [c](D &y, real_part_t<D> const &v) { dual_part(y, c) = v; }, x.raw_view(),
      p.cview());
}
// Every part of x (the value, then partials 0 .. K-1) as contiguous plain tensors, in one pass
// over x (the fused nodes need them all: one pass instead of one per part). take(s): a fresh
// contiguous plain tensor of shape s for each part (default: its own allocation).
template <class D, class Take>
std::array<tensor<real_part_t<D>>, D::size + 1> dual_split(tensor<D> const &x, Take &&take) {
  using R = real_part_t<D>;
  dual_host_only("dualcast (a tape over duals)", x.dev());
  std::array<tensor<R>, D::size + 1> r;
  R *p[D::size + 1];
  for (int c = 0; c <= D::size; ++c) {
    r[std::size_t(c)] = take(x.dims());
    p[c] = r[std::size_t(c)].raw_data();
  }
  if (packed_dual_v<D> && x.is_contiguous()) { // (loops on pointers, which vectorize)
    R const *__restrict xe = reinterpret_cast<R const *>(x.data());
    index_t const n = x.size();
    constexpr int w = D::size + 1; // (a dual is its value and partials, packed: dual_part_view)
    if constexpr (D::size == 1) {
      R *__restrict p0 = p[0], *__restrict p1 = p[1];
      for (index_t e = 0; e < n; ++e)
        p0[e] = xe[2 * e], p1[e] = xe[2 * e + 1];
    } else {
      for (int c = 0; c < w; ++c) {
        R *__restrict pc = p[c];
        for (index_t e = 0; e < n; ++e)
          pc[e] = xe[w * e + c];
      }
    }
    return r;
  }
  index_t e = 0; // (each_element visits the elements in row-major order)
  each_element(
      x.dims(),
      [&](D const &v) {
        p[0][e] = v.val;
        for (int k = 0; k < D::size; ++k)
          p[k + 1][e] = v.d[k];
        ++e;
      },
      x.cview());
  return r;
}
template <class D> std::array<tensor<real_part_t<D>>, D::size + 1> dual_split(tensor<D> const &x) {
  return dual_split(x, [&x](shape const &s) { return tensor<real_part_t<D>>::empty(s, x.dev()); });
}
// Every part of x (the value, then partials 0 .. K-1) in one pass, each laid out as
// dual_component_like lays it out (the gemms of the parts see the plain tape's layouts).
template <class D>
std::array<tensor<real_part_t<D>>, D::size + 1> dual_split_like(tensor<D> const &x) {
  dense_order const o = dense_order_of(x);
  tensor<D> xp = x.permuted(o.order);
  if (!xp.is_contiguous())
    return dual_split(x);
  auto r = dual_split(xp);
  for (auto &t : r)
    t = t.permuted(o.inverse);
  return r;
}
// Whether every element of a part (a plain tensor from dual_split: contiguous in its permuted
// layout) is zero: a constant's tangent. Stops at the first non-zero.
template <class R> bool all_zero_part(tensor<R> const &p) {
  R const *e = p.data();
  for (index_t i = 0, n = p.size(); i < n; ++i)
    if (e[i] != 0)
      return false;
  return true;
}
// The values of x laid out as dual_component_like lays them out, when every partial of x is zero
// (a constant's, as the data of a loss); else an undefined tensor, found at the first non-zero
// partial -- usually the first element, so a variable costs next to nothing -- and also for x
// not a permutation of a dense array (the caller's general way then decides). One pass that
// copies the values and tests the partials, in blocks (a block that the compiler vectorizes, then
// the test).
template <class D> tensor<real_part_t<D>> dual_values_if_constant(tensor<D> const &x) {
  using R = real_part_t<D>;
  dual_host_only("dualcast (a tape over duals)", x.dev());
  dense_order const o = dense_order_of(x);
  tensor<D> const xp = x.permuted(o.order);
  if (!packed_dual_v<D> || !xp.is_contiguous())
    return {};
  constexpr int w = D::size + 1; // (packed: dual_part_view)
  R const *__restrict xe = reinterpret_cast<R const *>(xp.data());
  index_t const n = xp.size();
  for (int k = 1; n > 0 && k < w; ++k)
    if (xe[k] != R(0))
      return {};
  auto r = tensor<R>::empty(xp.dims(), x.dev());
  R *__restrict y = r.raw_data();
  // The partials' bits ORed, the sign bit shifted out (-0 is zero; a NaN is not): integer
  // operations, which vectorize with the copy.
  using U = std::conditional_t<sizeof(R) == 8, std::uint64_t, std::uint32_t>;
  static_assert(sizeof(U) == sizeof(R));
  constexpr index_t block = 1024;
  for (index_t e0 = 0; e0 < n; e0 += block) {
    index_t const e1 = std::min(n, e0 + block);
    U live = 0;
    for (index_t e = e0; e < e1; ++e) {
      y[e] = xe[w * e];
      for (int k = 1; k < w; ++k)
        live |= std::bit_cast<U>(xe[w * e + k]) << 1;
    }
    if (live != 0)
      return {};
  }
  return r.permuted(o.inverse);
}
// The dual tensor of shape s whose parts are parts (value, partials; each contiguous, shape s).
template <class D>
tensor<D> dual_join(shape const &s, std::array<tensor<real_part_t<D>>, D::size + 1> const &parts) {
  auto r = tensor<D>::empty(s);
  D *y = r.raw_data();
  index_t const n = s.size();
  for (index_t e = 0; e < n; ++e) {
    y[e].val = parts[0].data()[e];
    for (int k = 0; k < D::size; ++k)
      y[e].d[k] = parts[std::size_t(k + 1)].data()[e];
  }
  return r;
}
// Writes parts (each of x's shape) into x: one pass when x and the parts are contiguous, else
// part by part (a fresh result: no version bump).
template <class D>
void dual_join_into(tensor<D> const &x,
                    std::array<tensor<real_part_t<D>>, D::size + 1> const &parts) {
  bool contiguous = packed_dual_v<D> && x.is_contiguous();
  for (auto const &p : parts)
    contiguous = contiguous && p.is_contiguous();
  if (!contiguous) {
    for (int c = -1; c < D::size; ++c)
      set_dual_component(x, c, parts[std::size_t(c + 1)]);
    return;
  }
  using R = real_part_t<D>;
  R *__restrict y = reinterpret_cast<R *>(x.raw_data()); // (packed: dual_part_view)
  index_t const n = x.size();
  constexpr int w = D::size + 1;
  if constexpr (D::size == 1) {
    R const *__restrict p0 = parts[0].data(), *__restrict p1 = parts[1].data();
    for (index_t e = 0; e < n; ++e)
      y[2 * e] = p0[e], y[2 * e + 1] = p1[e];
  } else {
    for (int c = 0; c < w; ++c) {
      R const *__restrict pc = parts[std::size_t(c)].data();
      for (index_t e = 0; e < n; ++e)
        y[w * e + c] = pc[e];
    }
  }
}
// f applied to every part of x (a linear operation on plain tensors): f(value), f(partial k).
template <class D, class F> tensor<D> dual_componentwise(tensor<D> const &x, F &&f) {
  tensor<D> r;
  for (int c = -1; c < D::size; ++c) {
    tensor<real_part_t<D>> rc = f(dual_component(x, c));
    if (c < 0)
      r = tensor<D>::empty(rc.dims(), rc.dev());
    set_dual_component(r, c, rc);
  }
  return r;
}

// f (a linear operation on plain tensors) applied to t, or on a tensor of duals to each part.
template <class T, class F> tensor<T> linear_parts(tensor<T> const &t, F &&f) {
  if constexpr (is_dual_v<T>)
    return dual_componentwise(t, f);
  else
    return f(t);
}

// The values of t (a tensor of duals: its value part; otherwise t itself).
template <class T> auto value_part(tensor<T> const &t) {
  if constexpr (is_dual_v<T>)
    return dual_component(t, -1);
  else
    return t;
}

} // namespace dualcast::detail
