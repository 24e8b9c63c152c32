// dualcast/backend/cuda/executor.cuh: the CUDA executor value: kernels run on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace dualcast {

// Which implementation runs a device-wide primitive (backend/cuda/device_primitives.cuh): the
// backend's own pass or CUB's; `own` stays the default until a GPU measurement
// (bench/gpu_primitives.cu) says otherwise. Run-to-run deterministic: every own pass, CUB's
// reductions and sorted histogram; NOT CUB's floating-point scan (docs/gpu.md).
enum class cuda_impl : unsigned char { own, cub };
struct cuda_primitives {
  cuda_impl reduce = cuda_impl::own;           // a whole array summed (cub::DeviceReduce::Sum)
  cuda_impl segmented_reduce = cuda_impl::own; // contiguous runs summed (DeviceSegmentedReduce)
  // cumsum along the innermost axis of fewer than 16 rows (cub::DeviceScan, a call per row; own:
  // the rows cut into pieces, ops/scan.hpp), its backward (the reverse scan) too
  cuda_impl scan = cuda_impl::own;
  // reduce_by_index where the rows are sorted by bin (ops/reduce_by_index.hpp): own sorts on the
  // host (device indices copied there and back), cub on the device (DeviceRadixSort, then
  // DeviceSegmentedReduce for `plus` of 1-D values)
  cuda_impl sorted_histogram = cuda_impl::own;
};

namespace detail {
inline std::atomic<unsigned> &cuda_primitives_bits() {
  static std::atomic<unsigned> bits{0};
  return bits;
}
} // namespace detail
// The choice every CUDA executor made afterwards starts from (the tape's included); set it before
// launching work, not while other threads launch.
inline void set_default_cuda_primitives(cuda_primitives p) {
  detail::cuda_primitives_bits().store(unsigned(p.reduce) | unsigned(p.segmented_reduce) << 1 |
                                           unsigned(p.scan) << 2 |
                                           unsigned(p.sorted_histogram) << 3,
                                       std::memory_order_relaxed);
}
inline cuda_primitives default_cuda_primitives() {
  unsigned const b = detail::cuda_primitives_bits().load(std::memory_order_relaxed);
  return {cuda_impl(b & 1u), cuda_impl(b >> 1 & 1u), cuda_impl(b >> 2 & 1u),
          cuda_impl(b >> 3 & 1u)};
}

struct cuda {
  cudaStream_t stream = nullptr;
  // Threads per block (clamped to the kernels' launch bounds, backend/cuda/launch.cuh).
  int block_size = 256;
  // The caller knows that every array operand is device memory (the tape's CUDA tensors), so no
  // launch asks CUDA where a pointer lives. With false (views of unknown origin) each launch
  // checks and reports host memory as dualcast::device_error.
  bool operands_on_device = false;
  // Own passes or CUB's for the broadcast reduction (backend/cuda/reduce.cuh), the scan and the
  // sorted histogram (backend/seam.hpp: backend_scan_sum, backend_sort_by_bin).
  cuda_primitives primitives = default_cuda_primitives();
};

} // namespace dualcast
