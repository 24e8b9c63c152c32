// dualcast/backend/cpu/reduce.hpp: sums an output-shaped array over the dimensions along which an
// input was broadcast (the adjoint of broadcasting, Zygote's `unbroadcast`).
//
// Each thread owns the input elements it writes (no atomics), and every element is summed over
// the broadcast dimensions in an order fixed by the shapes alone, whatever the thread count, so
// results are reproducible bit for bit. A bfloat16 / half source (S) is read in 16 bits and summed
// in float (T), in the order the float source's sum takes: the same bits as summing the widened
// array, without the widened copy.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/cpu/convert.hpp>
#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/core/compiled.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace dualcast::detail::cpu_backend {

// dst (shape broadcastable to s) = [dst +] sum of src (contiguous, shape s) over the dimensions
// where dst has extent 1 or is missing. S: the source's element type (T, or bfloat16 / half with T
// float).
template <class T, class S = T>
void reduce_broadcast(cpu const &ex, shape const &s, S const *src, view<T> dst, bool accumulate) {
  static_assert(std::is_same_v<S, T> || (is_float16_v<S> && std::is_same_v<T, float>),
                "reduce_broadcast: a source of the sum's type, or 16 bits summed in float");
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
      S const *base = src + src_base[0];
      for (index_t r = 0; r < n_reduced; ++r) {
        S const *row = base + decode(r, reduced, nr_dims, src_stride);
        if constexpr (is_float16_v<S>) { // (widened with the vector conversions first)
          float w[block];
          widen_contiguous(storage_of<S>, reinterpret_cast<std::uint16_t const *>(row), w, n);
          for (index_t k = 0; k < n; ++k)
            acc[k] += w[k];
        } else {
          for (index_t k = 0; k < n; ++k)
            acc[k] += row[k];
        }
      }
    } else {
      for (index_t r = 0; r < n_reduced; ++r) {
        index_t roff = decode(r, reduced, nr_dims, src_stride);
        for (index_t k = 0; k < n; ++k)
          acc[k] += T(src[src_base[k] + roff]);
      }
    }
    T *out = dst.data();
    for (index_t k = 0; k < n; ++k)
      out[dst_off[k]] = accumulate ? out[dst_off[k]] + acc[k] : acc[k];
  };

  const int threads = n_kept * n_reduced < (index_t(1) << 15) ? 1 : ex.thread_count();

  // Long contiguous rows: the reduced dimensions innermost (a whole-array sum, a sum over the
  // last axes), so kept element k sums src[k * n_reduced, (k + 1) * n_reduced). Rows are cut
  // into chunks of a fixed length, each summed with `lanes` independent accumulators (a loop
  // the compiler vectorises without reassociating anything), then a row's chunks are added in
  // order: the threads share long rows and the bits do not depend on their number.
  bool const rows_contiguous = nr_dims > 0 && (nk_dims == 0 || kept[nk_dims - 1] < reduced[0]);
  if (rows_contiguous && n_reduced >= 64) {
    constexpr index_t chunk = 8192;
    constexpr int lanes = 16;
    index_t const per_row = (n_reduced + chunk - 1) / chunk, tasks = n_kept * per_row;
    std::vector<T> part(static_cast<std::size_t>(tasks));
    auto sum_chunk = [&](index_t t) {
      index_t const k = t / per_row, c = t % per_row;
      S const *p = src + k * n_reduced + c * chunk;
      index_t const m = std::min(chunk, n_reduced - c * chunk);
      T acc[lanes] = {};
      index_t j = 0;
      if constexpr (is_float16_v<S>) {
        // Widened 512 at a time into a buffer in L1 (vector conversions), then the float loop:
        // the same additions in the same order.
        constexpr index_t piece = 512; // (a multiple of lanes)
        float w[piece];
        while (j + lanes <= m) {
          index_t const len = std::min(piece, (m - j) / lanes * lanes);
          widen_contiguous(storage_of<S>, reinterpret_cast<std::uint16_t const *>(p + j), w, len);
          for (index_t i = 0; i < len; i += lanes)
            for (int l = 0; l < lanes; ++l)
              acc[l] += w[i + l];
          j += len;
        }
      } else {
        for (; j + lanes <= m; j += lanes)
          for (int l = 0; l < lanes; ++l)
            acc[l] += p[j + l];
      }
      T total = T(0);
      for (int l = 0; l < lanes; ++l)
        total += acc[l];
      for (; j < m; ++j)
        total += T(p[j]);
      part[std::size_t(t)] = total;
    };
    if (threads <= 1 || tasks == 1) {
      for (index_t t = 0; t < tasks; ++t)
        sum_chunk(t);
    } else {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
      for (index_t t = 0; t < tasks; ++t)
        sum_chunk(t);
    }
    T *out = dst.data();
    for (index_t k = 0; k < n_kept; ++k) {
      T total = T(0);
      for (index_t c = 0; c < per_row; ++c)
        total += part[std::size_t(k * per_row + c)];
      index_t const o = decode(k, kept, nk_dims, dst_stride);
      out[o] = accumulate ? out[o] + total : total;
    }
    return;
  }

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

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE void reduce_broadcast<T>(cpu const &, shape const &, T const *, view<T>,    \
                                                bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace dualcast::detail::cpu_backend
