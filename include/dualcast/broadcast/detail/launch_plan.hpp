// dualcast/broadcast/detail/launch_plan.hpp: turns a checked call into what a backend receives
// (backend/map_params.hpp): the iteration shape, each array operand's pointer and strides aligned
// to it, and the table of scalar arguments the element operation reads.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/map_params.hpp>
#include <dualcast/kernel/detail/element_ops.hpp>

#include <cstddef>
#include <tuple>
#include <type_traits>

namespace dualcast::detail {

// Strides of view v aligned to shape s (right-aligned, 0 on broadcast dimensions).
template <class T, class P> void align_operand(operand<P> &o, view<T> const &v, shape const &s) {
  o.ptr = v.data();
  for (int d = 0; d < s.rank; ++d) {
    int j = v.rank() - s.rank + d;
    o.stride[d] = (j < 0 || v.extent(j) == 1) ? 0 : v.stride(j);
  }
}
// An erased view (float, bfloat16 or half elements) as an operand of a float pass: its pointer
// keeps pointing at its own elements, its storage tag says which (backend/map_params.hpp).
template <class P>
void align_operand(operand<P> &o, view<any_float const> const &v, shape const &s) {
  static_assert(std::is_same_v<std::remove_const_t<P>, float>);
  o.ptr = static_cast<P *>(const_cast<void *>(v.data()));
  o.st = v.kind();
  for (int d = 0; d < s.rank; ++d) {
    int j = v.rank() - s.rank + d;
    o.stride[d] = (j < 0 || v.extent(j) == 1) ? 0 : v.stride(j);
  }
}
template <class P> void align_operand(operand<P> &o, view<any_float> const &v, shape const &s) {
  align_operand(o, view<any_float const>(v), s);
}
// n views as operands (out of line: one instance per element type, whatever n is).
template <class T, class P>
[[gnu::noinline]] void align_operands(operand<P> *o, view<T> const *v, std::size_t n,
                                      shape const &s) {
  for (std::size_t i = 0; i < n; ++i)
    align_operand(o[i], v[i], s);
}

// The type a call computes in: its element type, or float for erased views.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<any_float> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

template <class T, int NI, int NO> struct launch_plan {
  map_params<compute_t<T>, NI, NO> p{};
  int ni = 0, no = 0;
  explicit launch_plan(shape const &s) {
    p.rank = s.rank;
    for (int d = 0; d < s.rank; ++d)
      p.ext[d] = s.ext[d];
  }
  shape dims() const {
    shape s;
    s.rank = p.rank;
    for (int d = 0; d < p.rank; ++d)
      s.ext[d] = p.ext[d];
    return s;
  }
  void add_in(view<T const> const &v) { align_operand(p.in[ni++], v, dims()); }
  void add_ins(view<T const> const *v, std::size_t n) {
    align_operands(p.in + ni, v, n, dims());
    ni += int(n);
  }
  // Outputs: overwritten, or with add[i] added to (v = v + result).
  void add_outs(view<T> const *v, bool const *add, std::size_t n) {
    align_operands(p.out + no, v, n, dims());
    for (std::size_t i = 0; i < n; ++i)
      p.add[no + int(i)] = add[i];
    no += int(n);
  }
};

template <class A> auto scalar_slot(A const &a) {
  if constexpr (is_view_v<A>)
    return array_marker{};
  else
    return a;
}

template <class F, class... A> auto scalar_table(A const &...args) {
  return typename arg_layout<A...>::scalars{make_tuple(scalar_slot(args)...)};
}

} // namespace dualcast::detail
