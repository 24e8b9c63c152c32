// dualcast/backend/cuda/blas.cuh: the CUDA backend's matrix product hooks: row-major products
// through cuBLAS (link CUDA::cublas), batches in one strided-batched call.
//
// cuBLAS is column-major. A row-major matrix with leading dimension ld is, read column-major,
// its transpose with the same ld, so row-major C = op(A) op(B) is column-major
// C^T = op(B)^T op(A)^T: the same call with the operands swapped and m, n exchanged.
#pragma once

#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/cuda/executor.cuh>
#include <dualcast/backend/seam.hpp>
#include <dualcast/core/errors.hpp>

#include <cublas_v2.h>

#include <map>
#include <string>
#include <type_traits>

namespace dualcast::detail::cuda_backend {

inline void check_blas(cublasStatus_t status, char const *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(std::string("dualcast: ") + what +
                     " failed: " + cublasGetStatusString(status));
}

// One handle per thread and GPU (cuBLAS handles must not be shared between threads that use
// them concurrently); destroyed at thread exit.
inline cublasHandle_t blas_handle() {
  struct handles {
    std::map<int, cublasHandle_t> by_device;
    ~handles() {
      for (auto &[d, h] : by_device)
        (void)cublasDestroy(h);
    }
  };
  thread_local handles hs;
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  auto it = hs.by_device.find(d);
  if (it != hs.by_device.end())
    return it->second;
  cublasHandle_t h = nullptr;
  check_blas(cublasCreate(&h), "cublasCreate");
  hs.by_device.emplace(d, h);
  return h;
}

// The thread's handle for the current GPU, issuing on the executor's stream; and the cuBLAS
// operation of an operand stored transposed or not.
inline cublasHandle_t blas_handle_on(cuda const &ex) {
  cublasHandle_t h = blas_handle();
  check_blas(cublasSetStream(h, ex.stream), "cublasSetStream");
  return h;
}
inline cublasOperation_t blas_op(bool transposed) { return transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Row-major C (m x n, leading dimension ldc) = op(A) op(B) + beta C on the executor's stream;
// op(A) is m x k, op(B) is k x n; ta / tb: the operand is stored transposed.
template <class T>
void gemm(cuda const &ex, bool ta, bool tb, int m, int n, int k, T const *a, int lda, T const *b,
          int ldb, T beta, T *c, int ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  cublasHandle_t h = blas_handle_on(ex);
  const T one = T(1);
  cublasOperation_t const opb = blas_op(tb), opa = blas_op(ta);
  if constexpr (std::is_same_v<T, float>)
    check_blas(cublasSgemm(h, opb, opa, n, m, k, &one, b, ldb, a, lda, &beta, c, ldc),
               "cublasSgemm");
  else
    check_blas(cublasDgemm(h, opb, opa, n, m, k, &one, b, ldb, a, lda, &beta, c, ldc),
               "cublasDgemm");
}

// `batch` products C_i = op(A_i) op(B_i) + beta C_i in one strided-batched cuBLAS call, X_i at
// x + i * stride_x (stride 0: shared); the C_i do not overlap.
template <class T>
void gemm_batched(cuda const &ex, bool ta, bool tb, int m, int n, int k, T const *a, int lda,
                  long long stride_a, T const *b, int ldb, long long stride_b, T beta, T *c,
                  int ldc, long long stride_c, int batch) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  cublasHandle_t h = blas_handle_on(ex);
  const T one = T(1);
  cublasOperation_t const opb = blas_op(tb), opa = blas_op(ta);
  if constexpr (std::is_same_v<T, float>)
    check_blas(cublasSgemmStridedBatched(h, opb, opa, n, m, k, &one, b, ldb, stride_b, a, lda,
                                         stride_a, &beta, c, ldc, stride_c, batch),
               "cublasSgemmStridedBatched");
  else
    check_blas(cublasDgemmStridedBatched(h, opb, opa, n, m, k, &one, b, ldb, stride_b, a, lda,
                                         stride_a, &beta, c, ldc, stride_c, batch),
               "cublasDgemmStridedBatched");
}

} // namespace dualcast::detail::cuda_backend

namespace dualcast::detail {

// The matrix product hook (backend/seam.hpp) of the CUDA backend.
template <class T>
void backend_gemm(hook, cuda const &ex, bool ta, bool tb, int m, int n, int k, T const *a, int lda,
                  T const *b, int ldb, T beta, T *c, int ldc) {
  cuda_backend::gemm(ex, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}
template <class T>
void backend_gemm_batched(hook, cuda const &ex, bool ta, bool tb, int m, int n, int k, T const *a,
                          int lda, long long stride_a, T const *b, int ldb, long long stride_b,
                          T beta, T *c, int ldc, long long stride_c, int batch) {
  cuda_backend::gemm_batched(ex, ta, tb, m, n, k, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                             stride_c, batch);
}

} // namespace dualcast::detail
