// dualcast/backend/cpu/reduce.hpp: sums an output-shaped array over the dimensions along which an
// input was broadcast (the adjoint of broadcasting, Zygote's `unbroadcast`).
//
// Each thread owns the input elements it writes (no atomics), and every element is summed over
// the broadcast dimensions in the same row-major order whatever the thread count, so results are
// reproducible bit for bit.
#pragma once

#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/shape.hpp>
#include <dualcast/view.hpp>

#include <algorithm>

namespace dualcast::detail::cpu_backend {

// dst (shape broadcastable to s) = [dst +] sum of src (contiguous, shape s) over the dimensions
// where dst has extent 1 or is missing.
template <class T>
void reduce_broadcast(cpu const &ex, shape const &s, T const *src, view<T> dst, bool accumulate) {
  int kept[max_rank], reduced[max_rank], nk_dims = 0, nr_dims = 0;
  index_t src_stride[max_rank], dst_stride[max_rank];
  index_t st = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    src_stride[d] = st;
    st *= s.ext[d];
  }
  index_t n_kept = 1, n_reduced = 1;
  for (int d = 0; d < s.rank; ++d) {
    int j = dst.rank() - s.rank + d;
    bool broadcast = j < 0 || dst.extent(j) == 1;
    dst_stride[d] = broadcast ? 0 : dst.stride(j);
    if (s.ext[d] == 1)
      continue;
    if (broadcast) {
      reduced[nr_dims++] = d;
      n_reduced *= s.ext[d];
    } else {
      kept[nk_dims++] = d;
      n_kept *= s.ext[d];
    }
  }
  if (n_kept == 0)
    return;

  constexpr index_t block = 64;
  const index_t blocks = (n_kept + block - 1) / block;
  auto decode = [&](index_t flat, int const *dims, int n, index_t const *stride) {
    index_t off = 0;
    for (int i = n - 1; i >= 0; --i) {
      index_t e = s.ext[dims[i]];
      off += (flat % e) * stride[dims[i]];
      flat /= e;
    }
    return off;
  };
  auto do_block = [&](index_t b) {
    index_t first = b * block, n = std::min(block, n_kept - first);
    // (zero-initialised: g++ cannot see that n >= 1 and warns about src_base[n - 1] below)
    index_t src_base[block] = {}, dst_off[block];
    T acc[block];
    for (index_t k = 0; k < n; ++k) {
      src_base[k] = decode(first + k, kept, nk_dims, src_stride);
      dst_off[k] = decode(first + k, kept, nk_dims, dst_stride);
      acc[k] = T(0);
    }
    // Offsets increase strictly with k, so a span of n - 1 means consecutive elements: the
    // common case (the kept dimensions innermost, e.g. a bias gradient), summed row by row in a
    // loop the compiler vectorises instead of through the offset table.
    if (src_base[n - 1] - src_base[0] == n - 1) {
      T const *base = src + src_base[0];
      for (index_t r = 0; r < n_reduced; ++r) {
        T const *row = base + decode(r, reduced, nr_dims, src_stride);
        for (index_t k = 0; k < n; ++k)
          acc[k] += row[k];
      }
    } else {
      for (index_t r = 0; r < n_reduced; ++r) {
        index_t roff = decode(r, reduced, nr_dims, src_stride);
        for (index_t k = 0; k < n; ++k)
          acc[k] += src[src_base[k] + roff];
      }
    }
    T *out = dst.data();
    for (index_t k = 0; k < n; ++k)
      out[dst_off[k]] = accumulate ? out[dst_off[k]] + acc[k] : acc[k];
  };

  const int threads = n_kept * n_reduced < (index_t(1) << 15) ? 1 : ex.thread_count();
  if (threads <= 1 || blocks == 1) {
    for (index_t b = 0; b < blocks; ++b)
      do_block(b);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) num_threads(threads)
  for (index_t b = 0; b < blocks; ++b)
    do_block(b);
#endif
}

} // namespace dualcast::detail::cpu_backend
