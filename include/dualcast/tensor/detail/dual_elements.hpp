// dualcast/tensor/detail/dual_elements.hpp: element loops for tensors of dual numbers (a tape over
// duals: forward over reverse, docs/higher-order.md), on the host.
//
// The broadcast machinery (apply, the CPU backend's SIMD batches, the reductions) runs on float
// and double arrays only; tensors of dual<T, K> elements take these plain loops instead -- one
// element at a time, in row-major order over the iteration shape -- and a dual tensor's real
// parts are split off into a plain tensor (split_component) wherever a real-valued kernel, a
// reduction or a gemm of the plain tape has to give the same bits.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/device.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/numbers/dual.hpp>

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

namespace dualcast::detail {

// Throws device_error unless d is the host: dual tensors have no GPU path yet.
inline void dual_host_only(char const *op, device const &d) {
  if (!d.is_host())
    throw device_error(std::string(op) + ": tensors of dual numbers (a tape over duals) are " +
                       "supported on the host only, not on " + to_string(d));
}

// The offsets of N strided arrays of one iteration shape, element after element in row-major
// order (an odometer over the multi-index).
template <std::size_t N> struct strided_walk {
  shape s;
  index_t const *strides[N > 0 ? N : 1] = {};
  index_t idx[max_rank] = {};
  index_t off[N > 0 ? N : 1] = {};
  void next() {
    for (int d = s.rank - 1; d >= 0; --d) {
      if (++idx[d] < s.ext[d]) {
        for (std::size_t k = 0; k < N; ++k)
          off[k] += strides[k][d];
        return;
      }
      for (std::size_t k = 0; k < N; ++k)
        off[k] -= (s.ext[d] - 1) * strides[k][d];
      idx[d] = 0;
    }
  }
};

// Calls f(elements...) for every element of shape s, in row-major order; each view has shape s
// (broadcast with stride 0 where needed). f receives references (const for const views).
template <class F, class... V> void each_element(shape const &s, F &&f, V const &...v) {
  index_t const n = s.size();
  if ((v.is_contiguous() && ...)) { // (the usual case: one index, no odometer)
    auto base = std::make_tuple(v.data()...);
    for (index_t e = 0; e < n; ++e)
      [&]<std::size_t... k>(std::index_sequence<k...>) { f(std::get<k>(base)[e]...); }
    (std::index_sequence_for<V...>{});
    return;
  }
  if (n == 0)
    return;
  if (s.rank == 0) {
    f(*v.data()...);
    return;
  }
  // Row by row: the odometer over the outer dimensions, a plain loop along the last one (a
  // gradient broadcast from a sum's scalar went element by element through the odometer: 3 % of
  // a small MLP's H v).
  int const last = s.rank - 1;
  index_t const m = s.ext[last];
  index_t const inner[] = {v.strides()[last]...};
  shape outer = s;
  outer.rank = last;
  strided_walk<sizeof...(V)> w{outer, {v.strides()...}};
  auto base = std::make_tuple(v.data()...);
  for (index_t row = 0; row < n / m; ++row, w.next())
    [&]<std::size_t... k>(std::index_sequence<k...>) {
      for (index_t j = 0; j < m; ++j)
        f(std::get<k>(base)[w.off[k] + j * inner[k]]...);
    }
  (std::index_sequence_for<V...>{});
}

// Component c of a dual element: -1 the value (its real part: value_of for nested duals' inner
// value is not meant here -- x.val), i >= 0 partial i.
template <class D> auto const &dual_part(D const &x, int c) { return c < 0 ? x.val : x.d[c]; }
template <class D> auto &dual_part(D &x, int c) { return c < 0 ? x.val : x.d[c]; }

} // namespace dualcast::detail
