// dualcast/backend/cuda/executor.cuh: the CUDA executor value: kernels run on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace dualcast {

// Which implementation runs a device-wide primitive (backend/cuda/device_primitives.cuh): the
// backend's own pass or CUB's. Both are run-to-run deterministic here; `own` stays the default
// until a GPU measurement (bench/gpu_primitives.cu) says otherwise.
enum class cuda_impl : unsigned char { own, cub };
struct cuda_primitives {
  cuda_impl reduce = cuda_impl::own;           // a whole array summed (cub::DeviceReduce::Sum)
  cuda_impl segmented_reduce = cuda_impl::own; // contiguous runs summed (DeviceSegmentedReduce)
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
  detail::cuda_primitives_bits().store(unsigned(p.reduce) | unsigned(p.segmented_reduce) << 1,
                                       std::memory_order_relaxed);
}
inline cuda_primitives default_cuda_primitives() {
  unsigned const b = detail::cuda_primitives_bits().load(std::memory_order_relaxed);
  return {cuda_impl(b & 1u), cuda_impl(b >> 1 & 1u)};
}

struct cuda {
  cudaStream_t stream = nullptr;
  // Threads per block (clamped to the kernels' launch bounds, backend/cuda/launch.cuh).
  int block_size = 256;
  // The caller knows that every array operand is device memory (the tape's CUDA tensors), so no
  // launch asks CUDA where a pointer lives. With false (views of unknown origin) each launch
  // checks and reports host memory as dualcast::device_error.
  bool operands_on_device = false;
  // Own passes or CUB's for the broadcast reduction (backend/cuda/reduce.cuh).
  cuda_primitives primitives = default_cuda_primitives();
};

} // namespace dualcast
