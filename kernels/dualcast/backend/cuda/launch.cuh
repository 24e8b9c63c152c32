// dualcast/backend/cuda/launch.cuh: what every dualcast __global__ function shares: its
// attributes, the largest block it is compiled for, and the grid for a grid-stride loop.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/core/config.hpp>

namespace dualcast::detail::cuda_backend {

// Every kernel is compiled with __launch_bounds__(max_block): a launch with more threads per
// block would fail, so the executor's block size is clamped to it.
inline constexpr int max_block = 256;

inline int block_for(cuda const &ex) {
  return ex.block_size < 1 ? max_block : (ex.block_size > max_block ? max_block : ex.block_size);
}

// Blocks for a grid-stride loop over `work` items (the loop covers what the cap leaves out).
inline unsigned grid_for(index_t work, int block) {
  index_t blocks = (work + block - 1) / block;
  const index_t cap = 65535LL * 32;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

} // namespace dualcast::detail::cuda_backend

// __global__ functions have hidden visibility and live in a versioned inline namespace
// (DUALCAST_KERNEL_ABI, core/config.hpp): two shared libraries built with different dualcast
// versions or for different GPU architectures then never share, and so never overwrite, each
// other's kernels. A kernel instantiated with a type of internal linkage (a kernel functor in an
// anonymous namespace) has internal linkage itself, and nvcc warns (#1407) that the attribute does
// not apply to it: right and harmless, so the warning is silenced where dualcast defines kernels.
#define DUALCAST_GLOBAL __global__ __attribute__((visibility("hidden")))
#define DUALCAST_KERNELS_BEGIN _Pragma("nv_diagnostic push") _Pragma("nv_diag_suppress 1407")
#define DUALCAST_KERNELS_END _Pragma("nv_diagnostic pop")
