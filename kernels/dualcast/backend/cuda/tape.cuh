// dualcast/backend/cuda/tape.cuh: what the tape (dualcast/autodiff.hpp) needs from the CUDA
// backend, beyond the fused-kernel hooks: device memory and copies, an index loop for row-wise
// operations, and cuBLAS matrix products. Included by dualcast/detail/device_dispatch.hpp in
// translation units compiled by nvcc; programs using matmul on CUDA tensors link CUDA::cublas.
#pragma once

#include <dualcast/backend/cuda.cuh>
#include <dualcast/backend/cuda/blas.cuh>
#include <dualcast/backend/cuda/for_each.cuh>
#include <dualcast/backend/cuda/memory.cuh>

namespace dualcast::detail {

template <class F> void backend_for_each(hook, cuda const &ex, index_t n, index_t, F const &f) {
  cuda_backend::for_each(ex, n, f);
}

template <class T>
void backend_gemm(hook, cuda const &ex, bool ta, bool tb, int m, int n, int k, T const *a, int lda,
                  T const *b, int ldb, T beta, T *c, int ldc) {
  cuda_backend::gemm(ex, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

} // namespace dualcast::detail
