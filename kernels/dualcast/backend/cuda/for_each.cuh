// dualcast/backend/cuda/for_each.cuh: f(i) for i in [0, n) on the GPU, one thread per index.
//
// The tape's row-wise operations (softmax rows, max / min groups, gather lines) are written once
// as function objects with a DUALCAST_HD call operator on an index; the CPU runs them in an
// OpenMP loop (backend/cpu/for_each.hpp), this kernel runs them on the GPU.
#pragma once

#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/cuda/launch.cuh>
#include <dualcast/shape.hpp>

#include <type_traits>

namespace dualcast::detail::cuda_backend {
inline namespace DUALCAST_KERNEL_ABI {
DUALCAST_KERNELS_BEGIN

template <class F>
DUALCAST_GLOBAL void __launch_bounds__(max_block) for_each_kernel(index_t n, F f) {
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += index_t(gridDim.x) * blockDim.x)
    f(i);
}

template <class F> void for_each(cuda const &ex, index_t n, F const &f) {
  static_assert(std::is_trivially_copyable_v<F>,
                "dualcast: the state of a CUDA for_each must be trivially copyable");
  require_device();
  if (n <= 0)
    return;
  const int block = block_for(ex);
  for_each_kernel<<<grid_for(n, block), block, 0, ex.stream>>>(n, f);
  check(cudaGetLastError(), "launching a dualcast for_each kernel");
}

DUALCAST_KERNELS_END
} // namespace DUALCAST_KERNEL_ABI
} // namespace dualcast::detail::cuda_backend
