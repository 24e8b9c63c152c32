// dualcast/ops/fused/strided_pass.hpp: one SIMD pass of an element operation over arrays given
// as a first element and a spacing (a run of equally spaced elements), without views: what the
// fused node on duals runs on its flat arrays, where each part of a contiguous dual array (its
// values, its tangent k) is every (K + 1)-th number. For 14-element arrays, building a 144-byte
// view per part cost that node more than its arithmetic (docs/higher-order.md).
#pragma once

#include <dualcast/arrays/view.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/kernel/detail/element_ops.hpp>

#include <array>
#include <cstddef>
#include <utility>

namespace dualcast::detail {

// A run of equally spaced elements: the first, and the spacing in elements (> 0).
template <class P> struct strided {
  P *first = nullptr;
  index_t step = 1;
};

// Op over n elements of each input and output run (out[o] overwritten, or added to where
// add[o]): one launch of rank 1, as apply_fresh_run's flat case. The caller has checked what the
// user's calls check (shapes, aliasing): the runs are its own arrays.
template <bool S, class R, class Op, class Ex, std::size_t NI, std::size_t NO>
void strided_pass(Ex const &ex, Op const &op, std::array<strided<R const>, NI> const &in,
                  std::array<strided<R>, NO> const &out, std::array<bool, NO> const &add,
                  index_t n) {
  static_assert(Op::num_in == int(NI), "dualcast: one input run per array the operation reads");
  auto p = flat_params<R, int(NI), int(NO)>(n);
  for (std::size_t i = 0; i < NI; ++i)
    p.in[i].ptr = in[i].first, p.in[i].stride[0] = in[i].step;
  for (std::size_t o = 0; o < NO; ++o)
    p.out[o].ptr = out[o].first, p.out[o].stride[0] = out[o].step, p.add[o] = add[o];
  backend_map<S>(hook{}, ex, p, op);
}

// The argument layout L with E more array arguments (view<R const>) after its own.
template <class L, class R, std::size_t E> struct layout_with_views;
template <class... X, class R, std::size_t E> struct layout_with_views<arg_layout<X...>, R, E> {
  template <std::size_t... e>
  static auto make(std::index_sequence<e...>)
      -> arg_layout<X..., std::conditional_t<(e < E), view<R const>, void>...>;
  using type = decltype(make(std::make_index_sequence<E>{}));
};

// The scalar table of layout L from each argument's stand-in: an array's array_marker, a
// scalar's value (scalar_table's, without views to build).
template <class L, class... X> typename L::scalars layout_scalars(X const &...x) {
  return typename L::scalars{make_tuple(x...)};
}

} // namespace dualcast::detail
