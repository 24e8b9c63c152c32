// dualcast/backend/cuda/for_each.cuh: f(i) for i in [0, n) on the GPU, one thread per index; and
// row operations f(r, lanes), one warp per row.
//
// The tape's row-wise operations (softmax rows, max / min groups, gather lines) are written once
// as function objects with a DUALCAST_HD call operator on an index; the CPU runs them in an
// OpenMP loop (backend/cpu/for_each.hpp), this kernel runs them on the GPU.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/cuda/launch.cuh>

#include <cstring>
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

// The lanes of a row operation on the GPU: the 32 threads of a warp share a row. reduce
// combines the lanes' values with a butterfly of warp shuffles (offsets 16, 8, 4, 2, 1): a fixed
// tree, so the result is deterministic and, op being commutative, the same bits on every lane.
struct warp_lanes {
  int lane_;
  DUALCAST_HD int lane() const { return lane_; }
  static constexpr int count() { return 32; }
  template <class T, class Op> __device__ T reduce(T x, Op const &op) const {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % sizeof(int) == 0,
                  "dualcast: a warp reduction moves whole 4-byte words");
    for (int offset = 16; offset > 0; offset /= 2) {
      int words[sizeof(T) / sizeof(int)];
      memcpy(words, &x, sizeof(T));
      for (auto &w : words)
        w = __shfl_xor_sync(0xffffffffu, w, offset);
      T other;
      memcpy(&other, words, sizeof(T));
      x = op(x, other);
    }
    return x;
  }
  // The inclusive scan of the lanes' values in lane order: lane k gets x_0 op ... op x_k (op
  // associative, not necessarily commutative; Hillis and Steele's five steps).
  template <class T, class Op> __device__ T scan(T x, Op const &op) const {
    for (int d = 1; d < 32; d *= 2) {
      T const earlier = broadcast(x, lane_ >= d ? lane_ - d : lane_);
      if (lane_ >= d)
        x = op(earlier, x);
    }
    return x;
  }
  // The lanes holding the same key as this one, as a bit mask (bit k: lane k).
  __device__ unsigned group_of(index_t key) const {
    return __match_any_sync(0xffffffffu, static_cast<long long>(key));
  }
  // Lane `from`'s x, on every lane.
  template <class T> __device__ T broadcast(T x, int from) const {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % sizeof(int) == 0,
                  "dualcast: a warp broadcast moves whole 4-byte words");
    int words[sizeof(T) / sizeof(int)];
    memcpy(words, &x, sizeof(T));
    for (auto &w : words)
      w = __shfl_sync(0xffffffffu, w, from);
    memcpy(&x, words, sizeof(T));
    return x;
  }
  // Orders the lanes' memory accesses before this point before theirs after it.
  __device__ static void sync() { __syncwarp(); }
};

// One warp per row, rows in a grid-stride loop (each warp's loop condition is the same for its
// 32 threads, so the shuffles always have the whole warp).
template <class F>
DUALCAST_GLOBAL void __launch_bounds__(max_block) for_each_row_kernel(index_t rows, F f) {
  const int warps = int(blockDim.x) / 32;
  const warp_lanes lanes{int(threadIdx.x) % 32};
  for (index_t r = index_t(blockIdx.x) * warps + int(threadIdx.x) / 32; r < rows;
       r += index_t(gridDim.x) * warps)
    f(r, lanes);
}

template <class F> void for_each_row(cuda const &ex, index_t rows, F const &f) {
  static_assert(std::is_trivially_copyable_v<F>,
                "dualcast: the state of a CUDA row operation must be trivially copyable");
  require_device();
  if (rows <= 0)
    return;
  const int block = block_for(ex) / 32 * 32 < 32 ? 32 : block_for(ex) / 32 * 32;
  const index_t warps = block / 32;
  for_each_row_kernel<<<grid_for((rows + warps - 1) / warps * block, block), block, 0, ex.stream>>>(
      rows, f);
  check(cudaGetLastError(), "launching a dualcast row kernel");
}

DUALCAST_KERNELS_END
} // namespace DUALCAST_KERNEL_ABI
} // namespace dualcast::detail::cuda_backend
