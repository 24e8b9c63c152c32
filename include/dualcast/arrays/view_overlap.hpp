// dualcast/arrays/view_overlap.hpp: whether two strided views share elements -- the aliasing checks
// of fused calls (broadcast/broadcast.hpp) and of the tape's gradient views.
//
// Views with the same strides (slices of one array) are decided element-exactly by a small
// lattice search; other pairs by their address ranges (may overlap: true).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/core/compiled.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace dualcast::detail {

struct extent_range {
  std::uintptr_t lo, hi; // bytes [lo, hi)
};
template <class T> extent_range memory_range(view<T> const &v) {
  index_t lo = 0, hi = 0;
  for (int d = 0; d < v.rank(); ++d) {
    index_t span = (v.extent(d) - 1) * v.stride(d);
    (span < 0 ? lo : hi) += span;
  }
  auto base = reinterpret_cast<std::uintptr_t>(v.data());
  index_t const bytes = element_bytes(v);
  return {base + static_cast<std::uintptr_t>(lo * bytes),
          base + static_cast<std::uintptr_t>((hi + 1) * bytes)};
}
// Do two views with the same strides, origins `delta` elements apart, share an element? They do
// iff delta = sum_d c_d * stride_d for integers c_d in [-(eb_d - 1), ea_d - 1]; searched from
// the largest stride down, each level keeping only the c_d whose remainder the smaller strides
// can still reach (one or two values for the strides of slices of one tensor). Gives up (true:
// may overlap) after `budget` steps.
struct lattice_dim {
  index_t stride, lo, hi;
};
inline bool lattice_hits(lattice_dim const *d, int n, index_t r, int &budget) {
  if (n == 0)
    return r == 0;
  if (--budget < 0)
    return true;
  index_t rest_lo = 0, rest_hi = 0;
  for (int j = 1; j < n; ++j)
    rest_lo += d[j].lo * d[j].stride, rest_hi += d[j].hi * d[j].stride;
  auto floor_div = [](index_t x, index_t y) { return x / y - ((x % y != 0) && (x < 0)); };
  index_t s = d[0].stride;
  index_t c_lo = -floor_div(-(r - rest_hi), s), c_hi = floor_div(r - rest_lo, s);
  c_lo = c_lo < d[0].lo ? d[0].lo : c_lo;
  c_hi = c_hi > d[0].hi ? d[0].hi : c_hi;
  for (index_t c = c_lo; c <= c_hi; ++c)
    if (lattice_hits(d + 1, n - 1, r - c * s, budget))
      return true;
  return false;
}
template <class T> bool same_stride_overlap(view<T> const &a, view<T> const &b) {
  lattice_dim d[max_rank];
  int n = 0;
  index_t oa = 0, ob = 0; // origins relative to a.data(), after making the strides positive
  index_t delta_bytes =
      reinterpret_cast<char const *>(b.data()) - reinterpret_cast<char const *>(a.data());
  index_t const bytes = element_bytes(a);
  if (storage_kind(a) != storage_kind(b) || delta_bytes % bytes != 0)
    return true; // (different storage: elements of different sizes, not decided here)
  ob = delta_bytes / bytes;
  for (int k = 0; k < a.rank(); ++k) {
    index_t ea = a.extent(k), eb = b.extent(k);
    index_t st = ea > 1 ? a.stride(k) : b.stride(k);
    if (ea > 1 && eb > 1 && a.stride(k) != b.stride(k))
      return true; // different layouts: not decided here
    if (st == 0 || (ea == 1 && eb == 1))
      continue;
    if (st < 0) {
      oa += (ea - 1) * st, ob += (eb - 1) * st;
      st = -st;
    }
    d[n++] = {st, -(eb - 1), ea - 1};
  }
  for (int i = 1; i < n; ++i) // largest stride first
    for (int j = i; j > 0 && d[j].stride > d[j - 1].stride; --j)
      std::swap(d[j], d[j - 1]);
  int budget = 4096;
  return lattice_hits(d, n, ob - oa, budget);
}
// Do two views share an element? Exact for views with the same strides (slices of one tensor,
// e.g. the gradients of an LSTM's four gate slices), else by their address ranges.
template <class T, class U> bool overlaps(view<T> const &a, view<U> const &b) {
  if (a.size() == 0 || b.size() == 0)
    return false;
  auto x = memory_range(a), y = memory_range(b);
  if (!(x.lo < y.hi && y.lo < x.hi))
    return false;
  using A = std::remove_const_t<T>;
  using B = std::remove_const_t<U>;
  if constexpr (std::is_same_v<A, B>) {
    if (a.rank() == b.rank())
      return same_stride_overlap(view<A const>(a), view<A const>(b));
  }
  return true;
}
// The address ranges of n views (empty ones as empty ranges), computed once for the pairwise
// checks of a call: most pairs of operands are distinct allocations, and two range comparisons
// settle them; the exact test runs only where ranges meet.
template <class T> extent_range range_of(view<T> const &v) {
  return v.size() == 0 ? extent_range{0, 0} : memory_range(v);
}
inline bool ranges_meet(extent_range a, extent_range b) { return a.lo < b.hi && b.lo < a.hi; }
class range_table {
public:
  template <class T> range_table(view<T> const *v, std::size_t n) {
    if (n > inline_size)
      more_.reset(new extent_range[n]);
    extent_range *r = data();
    for (std::size_t i = 0; i < n; ++i)
      r[i] = range_of(v[i]);
  }
  extent_range operator[](std::size_t i) const { return more_ ? more_[i] : inline_[i]; }
  // Whether x meets any of the first n ranges: one branch-free pass (the usual answer is no --
  // distinct allocations -- and the caller's pairwise loop, with its exact tests, is skipped).
  // The D-LSTM's 12-input fused node made 300 pairwise tests per backward, 11 % of the gradient.
  bool any_meets(extent_range x, std::size_t n) const {
    extent_range const *r = more_ ? more_.get() : inline_;
    bool any = false;
    for (std::size_t i = 0; i < n; ++i)
      any |= (x.lo < r[i].hi) & (r[i].lo < x.hi);
    return any;
  }

private:
  extent_range *data() { return more_ ? more_.get() : inline_; }
  static constexpr std::size_t inline_size = 64;
  extent_range inline_[inline_size];
  std::unique_ptr<extent_range[]> more_;
};

template <class T, class U> bool same_elements(view<T> const &a, view<U> const &b, shape const &s) {
  // a (an output of shape s) and b (an input broadcast to s) address the same element everywhere.
  if (static_cast<void const *>(a.data()) != static_cast<void const *>(b.data()) ||
      b.rank() > s.rank || storage_kind(a) != storage_kind(b))
    return false;
  for (int d = 0; d < s.rank; ++d) {
    int j = b.rank() - s.rank + d;
    index_t bs = (j < 0 || b.extent(j) == 1) ? 0 : b.stride(j);
    if (s.ext[d] != 1 && a.stride(d) != bs)
      return false;
  }
  return true;
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE bool same_stride_overlap<T const>(view<T const> const &,                    \
                                                         view<T const> const &);                   \
  DUALCAST_INSTANTIATE bool overlaps<T const, T const>(view<T const> const &,                      \
                                                       view<T const> const &);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace dualcast::detail
