// dualcast/backend/map_params.hpp: the plain data a backend receives for one fused pass: the
// iteration shape and, per array operand, a pointer and strides aligned to that shape (stride 0
// on broadcast dimensions), and whether each output is overwritten or added to. Trivially
// copyable, so it can be a CUDA kernel parameter.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/core/config.hpp>

namespace dualcast::detail {

// `st` says how the elements are stored: as T, or (T = float only) as bfloat16 / half, which the
// backend widens on load and rounds once on store; ptr then points at those 16-bit elements and
// the strides count them.
template <class T> struct operand {
  T *ptr;
  index_t stride[max_rank];
  element_storage st = element_storage::native;
};

template <class T, int NI, int NO> struct map_params {
  int rank;
  index_t ext[max_rank];
  operand<T const> in[NI > 0 ? NI : 1];
  operand<T> out[NO > 0 ? NO : 1];
  // Per output: add the result to what the output holds (out = out + result) instead of
  // overwriting it. Accumulation is the backend's store, not the element operation's: one
  // operation serves both, compiled once.
  bool add[NO > 0 ? NO : 1];
};

// Whether any operand of p is stored in 16 bits (the backends' converting path).
template <class T, int NI, int NO> DUALCAST_HD bool has_float16(map_params<T, NI, NO> const &p) {
  bool any = false;
  for (int k = 0; k < NI; ++k)
    any = any || p.in[k].st != element_storage::native;
  for (int k = 0; k < NO; ++k)
    any = any || p.out[k].st != element_storage::native;
  return any;
}

// Merges dimensions that every operand walks contiguously, and drops size-1 dimensions, so the
// common cases (all contiguous; a bias broadcast over rows) become rank 1 or 2. The innermost
// dimension of the result is the one backends vectorise along. Returns the number of elements.
template <class T, int NI, int NO> inline index_t collapse_dims(map_params<T, NI, NO> &p) {
  // One table of every operand's strides (a conditional p.in[o] / p.out[o - NI] inside the loops
  // below makes GCC assume the loops stop at o == NI: -Waggressive-loop-optimizations).
  constexpr int n_ops = NI + NO;
  index_t *strides[n_ops > 0 ? n_ops : 1];
  for (int o = 0; o < NI; ++o)
    strides[o] = p.in[o].stride;
  for (int o = 0; o < NO; ++o)
    strides[NI + o] = p.out[o].stride;
  auto stride_of = [&](int o, int d) -> index_t & { return strides[o][d]; };
  int r = 0;
  for (int d = 0; d < p.rank; ++d) {
    if (p.ext[d] == 1)
      continue;
    if (r > 0) {
      bool mergeable = true;
      for (int o = 0; o < n_ops && mergeable; ++o)
        mergeable = stride_of(o, r - 1) == stride_of(o, d) * p.ext[d];
      if (mergeable) {
        p.ext[r - 1] *= p.ext[d];
        for (int o = 0; o < n_ops; ++o)
          stride_of(o, r - 1) = stride_of(o, d);
        continue;
      }
    }
    p.ext[r] = p.ext[d];
    for (int o = 0; o < n_ops; ++o)
      stride_of(o, r) = stride_of(o, d);
    ++r;
  }
  if (r == 0) { // a single element
    p.ext[0] = 1;
    for (int o = 0; o < n_ops; ++o)
      stride_of(o, 0) = 0;
    r = 1;
  }
  p.rank = r;
  index_t total = 1;
  for (int d = 0; d < r; ++d)
    total *= p.ext[d];
  return total;
}

} // namespace dualcast::detail
