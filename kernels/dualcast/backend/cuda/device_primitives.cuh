// dualcast/backend/cuda/device_primitives.cuh: CUB's device-wide primitives beside the backend's
// own passes (issue 40, item 3), each with its temporary storage from the stream-ordered scratch
// allocator (backend/cuda/memory.cuh).
//
//   cub_sum             cub::DeviceReduce::Sum: dst[0] = the sum of n elements
//   cub_segmented_sum   cub::DeviceSegmentedReduce::Sum: dst[k] = the sum of run k of `len`
//                       contiguous elements
//   cub_inclusive_sum   cub::DeviceScan::InclusiveSum: a prefix sum of n elements
//   cub_scan_sum        the same, inclusive or exclusive, forward or from the end (cumsum and its
//                       adjoint, backend_scan_sum)
//   cub_histogram_plus  the sorted histogram: cub::DeviceRadixSort::SortPairs of (bin, value)
//                       then cub::DeviceSegmentedReduce::Sum over each bin's run
//   cub_sort_by_bin     the rows by bin: DeviceRadixSort::SortPairs of (bin, position), then
//                       each bin's first row (reduce_by_index's sorted path, backend_sort_by_bin)
//
// Determinism (CUB's documentation, CCCL 3.0): DeviceReduce and DeviceSegmentedReduce are run-to-
// run deterministic for floating-point sums on one GPU (fixed configuration), so reduce_broadcast
// (reduce.cuh) may take them (cuda_primitives, executor.cuh); the radix sort is stable, so the
// sorted histogram is too (each bin's rows in increasing index order, then the segmented reduce).
// DeviceScan's floating-point sums are NOT run-to-run deterministic (decoupled look-back: the
// tiles' prefixes combine in whichever order they arrive). cub::DeviceHistogram counts samples
// (integers: exact, deterministic) but cannot sum a value per row, so it does not serve the
// weighted `plus` histogram. The own passes' results do not vary from run to run.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/cuda/launch.cuh>
#include <dualcast/backend/cuda/memory.cuh>

// (g++ 12 at -O1 warns that DispatchScan's `dispatch` "may be used uninitialized" inside CUB's
// DeviceScan::InclusiveSum: a false positive in CUB's host code, which CI's -Werror would refuse)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cuda/std/iterator>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstddef>

namespace dualcast::detail::cuda_backend {
inline namespace DUALCAST_KERNEL_ABI {
DUALCAST_KERNELS_BEGIN

// A CUB call in its two phases: the size of its temporary storage, then the call with it.
template <class Call> void cub_call(cudaStream_t s, char const *what, Call const &call) {
  std::size_t bytes = 0;
  check(call(nullptr, bytes), what);
  auto temp = scratch_buffer<unsigned char>(s, index_t(bytes > 0 ? bytes : 1));
  check(call(static_cast<void *>(temp.get()), bytes), what);
}

template <class T> void cub_sum(cuda const &ex, T const *src, index_t n, T *dst) {
  cub_call(ex.stream, "cub::DeviceReduce::Sum", [&](void *t, std::size_t &b) {
    return cub::DeviceReduce::Sum(t, b, src, dst, n, ex.stream);
  });
}

// offsets[k] = k * len for k <= n (the runs' bounds of a segmented reduce). (The kernels here are
// templates, as every kernel in a header: a plain __global__ function would be defined again by
// each translation unit that includes it, and their objects would not link together.)
template <class I>
DUALCAST_GLOBAL void __launch_bounds__(max_block) run_offsets(I *offsets, I n, I len) {
  for (I k = I(blockIdx.x) * blockDim.x + threadIdx.x; k <= n; k += I(gridDim.x) * blockDim.x)
    offsets[k] = k * len;
}

template <class T>
void cub_segmented_sum(cuda const &ex, T const *src, index_t runs, index_t len, T *dst) {
  if (runs <= 0)
    return;
  auto offsets = scratch_buffer<index_t>(ex.stream, runs + 1);
  run_offsets<<<grid_for(runs + 1, max_block), max_block, 0, ex.stream>>>(offsets.get(), runs, len);
  check(cudaGetLastError(), "launching the segment offsets");
  index_t const *o = offsets.get();
  cub_call(ex.stream, "cub::DeviceSegmentedReduce::Sum", [&](void *t, std::size_t &b) {
    return cub::DeviceSegmentedReduce::Sum(t, b, src, dst, runs, o, o + 1, ex.stream);
  });
}

template <class T> void cub_inclusive_sum(cuda const &ex, T const *src, T *dst, index_t n) {
  if (n <= 0)
    return;
  cub_call(ex.stream, "cub::DeviceScan::InclusiveSum", [&](void *t, std::size_t &b) {
    return cub::DeviceScan::InclusiveSum(t, b, src, dst, n, ex.stream);
  });
}

// dst = the prefix sums of n elements: inclusive (dst[i] = src[0] + ... + src[i]) or exclusive
// (dst[0] = 0), or with `reverse` the same from the end (dst[i] = src[i] + ... + src[n - 1]: the
// adjoint of an inclusive cumsum; exclusive: of an exclusive one).
template <class T>
void cub_scan_sum(cuda const &ex, T const *src, T *dst, index_t n, bool exclusive, bool reverse) {
  if (n <= 0)
    return;
  auto run = [&](auto in, auto out) {
    if (exclusive)
      cub_call(ex.stream, "cub::DeviceScan::ExclusiveSum", [&](void *t, std::size_t &b) {
        return cub::DeviceScan::ExclusiveSum(t, b, in, out, n, ex.stream);
      });
    else
      cub_call(ex.stream, "cub::DeviceScan::InclusiveSum", [&](void *t, std::size_t &b) {
        return cub::DeviceScan::InclusiveSum(t, b, in, out, n, ex.stream);
      });
  };
  if (reverse)
    run(::cuda::std::reverse_iterator<T const *>(src + n),
        ::cuda::std::reverse_iterator<T *>(dst + n));
  else
    run(src, dst);
}

// The sort keys: a row's bin, `bins` for an index outside [0, bins) (sorted last, summed nowhere).
template <class I>
DUALCAST_GLOBAL void __launch_bounds__(max_block) bin_keys(I const *idx, I n, I bins, I *keys) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    I const k = idx[i];
    keys[i] = k >= 0 && k < bins ? k : bins;
  }
}
// start[b] = the first sorted row of bin b or later (a binary search), b <= bins.
template <class I>
DUALCAST_GLOBAL void __launch_bounds__(max_block)
    bin_starts(I const *sorted, I n, I bins, I *start) {
  for (I b = I(blockIdx.x) * blockDim.x + threadIdx.x; b <= bins; b += I(gridDim.x) * blockDim.x) {
    I lo = 0, hi = n;
    while (lo < hi) {
      I const mid = lo + (hi - lo) / 2;
      if (sorted[mid] < b)
        lo = mid + 1;
      else
        hi = mid;
    }
    start[b] = lo;
  }
}

// The key bits a radix sort of bins in [0, bins] must look at.
inline int bin_key_bits(index_t bins) {
  int end_bit = 1;
  while (end_bit < 63 && (index_t(1) << end_bit) <= bins)
    ++end_bit;
  return end_bit;
}

template <class I> DUALCAST_GLOBAL void __launch_bounds__(max_block) positions(I *p, I n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x)
    p[i] = i;
}

// The rows of each bin, on the device: order[start[b] .. start[b + 1]) are bin b's rows in
// increasing position (the radix sort is stable), start: bins + 1 entries; order: n entries, the
// rows outside [0, bins) last (after start[bins]). The same numbers as a counting sort.
inline void cub_sort_by_bin(cuda const &ex, index_t const *idx, index_t n, index_t bins,
                            index_t *start, index_t *order) {
  if (n <= 0) {
    check(cudaMemsetAsync(start, 0, std::size_t(bins + 1) * sizeof(index_t), ex.stream),
          "cudaMemsetAsync");
    return;
  }
  auto keys = scratch_buffer<index_t>(ex.stream, n);
  auto sorted_keys = scratch_buffer<index_t>(ex.stream, n);
  auto pos = scratch_buffer<index_t>(ex.stream, n);
  bin_keys<<<grid_for(n, max_block), max_block, 0, ex.stream>>>(idx, n, bins, keys.get());
  check(cudaGetLastError(), "launching the histogram's keys");
  positions<<<grid_for(n, max_block), max_block, 0, ex.stream>>>(pos.get(), n);
  check(cudaGetLastError(), "launching the row positions");
  index_t const *k_in = keys.get(), *p_in = pos.get();
  index_t *k_out = sorted_keys.get();
  int const end_bit = bin_key_bits(bins);
  cub_call(ex.stream, "cub::DeviceRadixSort::SortPairs", [&](void *t, std::size_t &b) {
    return cub::DeviceRadixSort::SortPairs(t, b, k_in, k_out, p_in, order, n, 0, end_bit,
                                           ex.stream);
  });
  bin_starts<<<grid_for(bins + 1, max_block), max_block, 0, ex.stream>>>(k_out, n, bins, start);
  check(cudaGetLastError(), "launching the histogram's bin starts");
}

// y[b] = the sum of values[i] over the rows i with idx[i] == b (y: bins elements, overwritten;
// idx: n device-side indices; an index outside [0, bins) is ignored, as reduce_by_index does).
template <class T>
void cub_histogram_plus(cuda const &ex, T const *values, index_t const *idx, index_t n,
                        index_t bins, T *y) {
  if (bins <= 0)
    return;
  if (n <= 0) {
    check(cudaMemsetAsync(y, 0, std::size_t(bins) * sizeof(T), ex.stream), "cudaMemsetAsync");
    return;
  }
  auto keys = scratch_buffer<index_t>(ex.stream, n);
  auto sorted_keys = scratch_buffer<index_t>(ex.stream, n);
  auto sorted = scratch_buffer<T>(ex.stream, n);
  auto start = scratch_buffer<index_t>(ex.stream, bins + 1);
  bin_keys<<<grid_for(n, max_block), max_block, 0, ex.stream>>>(idx, n, bins, keys.get());
  check(cudaGetLastError(), "launching the histogram's keys");
  int const end_bit = bin_key_bits(bins); // only the bits a key in [0, bins] can have
  index_t const *k_in = keys.get();
  index_t *k_out = sorted_keys.get();
  T *v_out = sorted.get();
  cub_call(ex.stream, "cub::DeviceRadixSort::SortPairs", [&](void *t, std::size_t &b) {
    return cub::DeviceRadixSort::SortPairs(t, b, k_in, k_out, values, v_out, n, 0, end_bit,
                                           ex.stream);
  });
  bin_starts<<<grid_for(bins + 1, max_block), max_block, 0, ex.stream>>>(k_out, n, bins,
                                                                         start.get());
  check(cudaGetLastError(), "launching the histogram's bin starts");
  index_t const *s = start.get();
  T const *v = v_out;
  cub_call(ex.stream, "cub::DeviceSegmentedReduce::Sum", [&](void *t, std::size_t &b) {
    return cub::DeviceSegmentedReduce::Sum(t, b, v, y, bins, s, s + 1, ex.stream);
  });
}

DUALCAST_KERNELS_END
} // namespace DUALCAST_KERNEL_ABI
} // namespace dualcast::detail::cuda_backend
