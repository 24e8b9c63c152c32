// dualcast/backend/cuda.cuh: the CUDA backend: the executor dualcast::cuda and its hooks (the
// list is in backend/seam.hpp), for .cu files compiled by nvcc. Kernels for the GPU are function
// objects with a DUALCAST_HD call operator (nvcc cannot inspect generic device lambdas on the
// host; see tests/cuda/cell_kernels.cu). The matrix product hook is in backend/cuda/blas.cuh.
#pragma once

#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/device_primitives.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/cuda/for_each.cuh>
#include <dualcast/backend/cuda/map.cuh>
#include <dualcast/backend/cuda/memory.cuh>
#include <dualcast/backend/cuda/reduce.cuh>
#include <dualcast/backend/seam.hpp>
#include <dualcast/core/errors.hpp>

#include <type_traits>

namespace dualcast {
template <> struct executor_traits<cuda> { static constexpr bool is_executor = true; };
} // namespace dualcast

namespace dualcast::detail {

template <bool Simd, class T, int NI, int NO, class Op>
void backend_map(hook, cuda const &ex, map_params<T, NI, NO> const &p, Op const &op) {
  cuda_backend::map(ex, p, op); // one thread per element: SIMD batches are a CPU matter
}

template <class T, class S>
void backend_reduce(hook, cuda const &ex, shape const &s, S const *src, view<T> dst,
                    bool accumulate) {
  cuda_backend::reduce_broadcast(ex, s, src, dst, accumulate);
}

// Scratch device memory, ordered on the executor's stream (backend/cuda/memory.cuh).
template <class T> using device_buffer = cuda_backend::device_buffer<T>;
template <class T> device_buffer<T> backend_buffer(hook, cuda const &ex, index_t n) {
  cuda_backend::require_device();
  return cuda_backend::scratch_buffer<T>(ex.stream, n);
}

template <class F> void backend_for_each(hook, cuda const &ex, index_t n, index_t, F const &f) {
  cuda_backend::for_each(ex, n, f);
}

template <class F>
void backend_for_each_row(hook, cuda const &ex, index_t rows, index_t, F const &f) {
  cuda_backend::for_each_row(ex, rows, f);
}

// CUB's device-wide primitives where the executor chooses them (cuda_primitives; float and double
// only), else false: the caller's own passes run.
template <class T>
bool backend_scan_sum(hook, cuda const &ex, T const *src, T *dst, index_t rows, index_t n,
                      bool exclusive, bool reverse) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (ex.primitives.scan != cuda_impl::cub)
      return false;
    for (index_t r = 0; r < rows; ++r) // (a call per row: used for few rows)
      cuda_backend::cub_scan_sum(ex, src + r * n, dst + r * n, n, exclusive, reverse);
    return true;
  } else {
    return false;
  }
}
inline bool backend_sort_by_bin(hook, cuda const &ex, index_t const *idx, index_t n, index_t bins,
                                index_t *start, index_t *order) {
  if (ex.primitives.sorted_histogram != cuda_impl::cub)
    return false;
  cuda_backend::cub_sort_by_bin(ex, idx, n, bins, start, order);
  return true;
}
template <class T>
bool backend_histogram_plus(hook, cuda const &ex, T const *values, index_t const *idx, index_t n,
                            index_t bins, T *y) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (ex.primitives.sorted_histogram != cuda_impl::cub)
      return false;
    cuda_backend::cub_histogram_plus(ex, values, idx, n, bins, y);
    return true;
  } else {
    return false;
  }
}

} // namespace dualcast::detail
