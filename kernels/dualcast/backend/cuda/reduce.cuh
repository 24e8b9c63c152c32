// dualcast/backend/cuda/reduce.cuh: the adjoint of broadcasting on a GPU: sums an output-shaped
// array over the dimensions along which an input was broadcast, without atomics.
//
// Reduced dimensions innermost (an input of shape (B, 1) against (B, H)): one block per input
// element, cub::BlockReduce over its contiguous run; when there are few such elements and long
// runs (the sum of a whole array: one block read 10^7 floats at 31 GB/s on an H200), each run is
// cut into chunks, a block per chunk, and the chunks' sums are added by a second pass. Otherwise (a
// bias (H,) against (B, H)): 32 neighbouring input elements per block, 8 threads summing
// interleaved rows of each, neighbouring threads reading neighbouring addresses. Both orders are
// fixed, so results do not vary from run to run. An executor may choose CUB's DeviceReduce /
// DeviceSegmentedReduce instead for reduced dimensions innermost (cuda_primitives; run-to-run
// deterministic too, device_primitives.cuh). A bfloat16 / half source is read in 16 bits and
// summed in float (no widened copy).
#pragma once

#include <dualcast/arrays/detail/chunks.hpp>
#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/device_primitives.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/cuda/launch.cuh>
#include <dualcast/backend/cuda/memory.cuh>

#include <cub/block/block_reduce.cuh>

#include <type_traits>

namespace dualcast::detail::cuda_backend {
inline namespace DUALCAST_KERNEL_ABI {
DUALCAST_KERNELS_BEGIN

template <class T, class S = T> struct reduce_params {
  S const *src; // (S: T, or bfloat16 / half summed in float)
  T *dst;
  int n_kept_dims, n_reduced_dims;
  index_t kept_ext[max_rank], reduced_ext[max_rank];
  index_t kept_src_stride[max_rank], kept_dst_stride[max_rank], reduced_src_stride[max_rank];
  index_t n_kept, n_reduced;
  // Runs cut into `chunks` pieces of chunk_len elements (the last shorter): block (k, c) writes
  // the sum of piece c of element k to dst[k * chunks + c] (a scratch array; 1: no cut).
  index_t chunks, chunk_len;
  bool accumulate;
};

__device__ inline index_t decode_offset(index_t flat, int n, index_t const *ext,
                                        index_t const *stride) {
  index_t off = 0;
  for (int i = n - 1; i >= 0; --i) {
    off += (flat % ext[i]) * stride[i];
    flat /= ext[i];
  }
  return off;
}

// Reduced dimensions outside kept ones (a bias (H,) against (B, H)): a block of 32 x 8 threads
// takes 32 neighbouring kept elements; thread (x, y) adds rows y, y + 8, ... of element x, and the
// 8 partial sums are added in y order. One thread per kept element (the first version) left an
// H200 nearly idle for a 4096-element bias over 4096 rows: 16 blocks, each thread 4096 dependent
// iterations with a 64-bit division in each.
inline constexpr int columns_x = 32, columns_y = 8;

template <class T, class S>
DUALCAST_GLOBAL void __launch_bounds__(columns_x *columns_y) reduce_columns(reduce_params<T, S> p) {
  __shared__ T partial[columns_y][columns_x];
  // One reduced dimension (the common case): its offsets need no division.
  const bool one_reduced = p.n_reduced_dims == 1;
  for (index_t k0 = index_t(blockIdx.x) * columns_x; k0 < p.n_kept;
       k0 += index_t(gridDim.x) * columns_x) {
    const index_t k = k0 + threadIdx.x;
    T acc = T(0);
    if (k < p.n_kept) {
      const index_t base = decode_offset(k, p.n_kept_dims, p.kept_ext, p.kept_src_stride);
      for (index_t r = threadIdx.y; r < p.n_reduced; r += columns_y)
        acc += T(p.src[base + (one_reduced ? r * p.reduced_src_stride[0]
                                           : decode_offset(r, p.n_reduced_dims, p.reduced_ext,
                                                           p.reduced_src_stride))]);
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && k < p.n_kept) {
      T total = partial[0][threadIdx.x];
      for (int y = 1; y < columns_y; ++y)
        total += partial[y][threadIdx.x];
      index_t d = decode_offset(k, p.n_kept_dims, p.kept_ext, p.kept_dst_stride);
      p.dst[d] = p.accumulate ? p.dst[d] + total : total;
    }
    __syncthreads(); // partial is reused by the next 32 elements
  }
}

template <class T, int Block, class S>
DUALCAST_GLOBAL void __launch_bounds__(Block) reduce_per_block(reduce_params<T, S> p) {
  using reduce = cub::BlockReduce<T, Block>;
  __shared__ typename reduce::TempStorage storage;
  for (index_t b = blockIdx.x; b < p.n_kept * p.chunks; b += gridDim.x) {
    const index_t k = b / p.chunks, r0 = b % p.chunks * p.chunk_len;
    const index_t r1 = p.n_reduced - r0 < p.chunk_len ? p.n_reduced : r0 + p.chunk_len;
    index_t base = decode_offset(k, p.n_kept_dims, p.kept_ext, p.kept_src_stride);
    T acc = T(0);
    for (index_t r = r0 + threadIdx.x; r < r1; r += Block)
      acc += T(p.src[base + r]); // contiguous run
    T total = reduce(storage).Sum(acc);
    if (threadIdx.x == 0) {
      if (p.chunks > 1) {
        p.dst[b] = total;
      } else {
        index_t d = decode_offset(k, p.n_kept_dims, p.kept_ext, p.kept_dst_stride);
        p.dst[d] = p.accumulate ? p.dst[d] + total : total;
      }
    }
    __syncthreads(); // storage is reused by the next element
  }
}

// dst at kept element k = [dst +] sums[k] (the sums of CUB's reductions, one per kept element).
template <class T, class S>
DUALCAST_GLOBAL void __launch_bounds__(max_block)
    store_kept_sums(reduce_params<T, S> p, T const *sums) {
  for (index_t k = index_t(blockIdx.x) * blockDim.x + threadIdx.x; k < p.n_kept;
       k += index_t(gridDim.x) * blockDim.x) {
    index_t const d = decode_offset(k, p.n_kept_dims, p.kept_ext, p.kept_dst_stride);
    p.dst[d] = p.accumulate ? p.dst[d] + sums[k] : sums[k];
  }
}

// dst (shape broadcastable to s) = [dst +] sum of src (contiguous, shape s) over broadcast dims.
template <class T, class S = T>
void reduce_broadcast(cuda const &ex, shape const &s, S const *src, view<T> dst, bool accumulate) {
  reduce_params<T, S> p{};
  p.src = src;
  p.dst = dst.data();
  p.accumulate = accumulate;
  p.n_kept = p.n_reduced = p.chunks = 1;
  index_t src_stride[max_rank];
  index_t st = 1;
  for (int d = s.rank - 1; d >= 0; --d)
    src_stride[d] = st, st *= s.ext[d];
  bool reduced_innermost = true; // every reduced dim after every kept dim, with unit src stride
  for (int d = 0; d < s.rank; ++d) {
    int j = dst.rank() - s.rank + d;
    bool broadcast = j < 0 || dst.extent(j) == 1;
    if (s.ext[d] == 1)
      continue;
    if (broadcast) {
      p.reduced_ext[p.n_reduced_dims] = s.ext[d];
      p.reduced_src_stride[p.n_reduced_dims++] = src_stride[d];
      p.n_reduced *= s.ext[d];
    } else {
      if (p.n_reduced_dims > 0)
        reduced_innermost = false;
      p.kept_ext[p.n_kept_dims] = s.ext[d];
      p.kept_src_stride[p.n_kept_dims] = src_stride[d];
      p.kept_dst_stride[p.n_kept_dims++] = dst.stride(j);
      p.n_kept *= s.ext[d];
    }
  }
  if (p.n_kept == 0)
    return;
  constexpr int block = max_block;
  if constexpr (std::is_same_v<S, T>) {
    // CUB's reductions where chosen (cuda_primitives): the kept elements' runs lie contiguous,
    // run k at k * n_reduced (src is contiguous, the reduced dimensions innermost).
    cuda_impl const impl = p.n_kept == 1 ? ex.primitives.reduce : ex.primitives.segmented_reduce;
    if (reduced_innermost && p.n_reduced > 1 && impl == cuda_impl::cub) {
      auto sums = scratch_buffer<T>(ex.stream, p.n_kept);
      if (p.n_kept == 1)
        cub_sum(ex, src, p.n_reduced, sums.get());
      else
        cub_segmented_sum(ex, src, p.n_kept, p.n_reduced, sums.get());
      store_kept_sums<<<grid_for(p.n_kept, block), block, 0, ex.stream>>>(p, sums.get());
      check(cudaGetLastError(), "launching the dualcast broadcast reduction");
      return;
    }
  }
  p.chunk_len = p.n_reduced;
  if (reduced_innermost && p.n_reduced >= block) {
    // Long runs of few elements are cut into chunks (arrays/detail/chunks.hpp: the same sums in the
    // same order on every run and every GPU).
    chunking const c = cut_runs(p.n_kept, p.n_reduced);
    p.chunks = c.chunks, p.chunk_len = c.len;
    if (p.chunks == 1) {
      reduce_per_block<T, block><<<grid_for(p.n_kept * block, block), block, 0, ex.stream>>>(p);
    } else {
      // Pass 1 into scratch (k * chunks + c), pass 2 sums each element's chunks in order.
      auto scratch = scratch_buffer<T>(ex.stream, p.n_kept * p.chunks);
      reduce_params<T, S> q1 = p;
      q1.dst = scratch.get();
      reduce_per_block<T, block>
          <<<grid_for(p.n_kept * p.chunks * block, block), block, 0, ex.stream>>>(q1);
      reduce_params<T> q{}; // (the chunk sums are T: p's fields, a T source)
      q.dst = p.dst;
      q.n_kept_dims = p.n_kept_dims, q.n_reduced_dims = p.n_reduced_dims;
      for (int d = 0; d < max_rank; ++d) {
        q.kept_ext[d] = p.kept_ext[d], q.reduced_ext[d] = p.reduced_ext[d];
        q.kept_dst_stride[d] = p.kept_dst_stride[d];
        q.reduced_src_stride[d] = p.reduced_src_stride[d];
      }
      q.n_kept = p.n_kept, q.accumulate = p.accumulate;
      q.src = scratch.get();
      q.n_reduced = q.chunk_len = p.chunks;
      q.chunks = 1;
      index_t st = p.chunks; // the chunk sums lie contiguous, `chunks` per kept element
      for (int d = p.n_kept_dims - 1; d >= 0; --d)
        q.kept_src_stride[d] = st, st *= p.kept_ext[d];
      reduce_per_block<T, block><<<grid_for(p.n_kept * block, block), block, 0, ex.stream>>>(q);
    }
  } else
    reduce_columns<T, S>
        <<<grid_for(p.n_kept, columns_x), dim3(columns_x, columns_y), 0, ex.stream>>>(p);
  check(cudaGetLastError(), "launching the dualcast broadcast reduction");
}

DUALCAST_KERNELS_END
} // namespace DUALCAST_KERNEL_ABI
} // namespace dualcast::detail::cuda_backend
