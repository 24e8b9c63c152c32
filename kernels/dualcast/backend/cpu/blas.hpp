// dualcast/backend/cpu/blas.hpp: the CPU backend's matrix product hook, through CBLAS (link a
// BLAS: the dualcast::dualcast target links the one CMake finds). Kept out of backend/cpu.hpp so
// that only programs using matmul need <cblas.h>.
#pragma once

#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/backend/seam.hpp>

#include <cblas.h>

#include <type_traits>

// A CBLAS whose symbols carry a prefix (the scipy-openblas wheels export scipy_cblas_sgemm):
// -DDUALCAST_CBLAS_PREFIX=scipy_ (CMake's DUALCAST_SCIPY_OPENBLAS_DIR sets it).
#ifdef DUALCAST_CBLAS_PREFIX
#define DUALCAST_DETAIL_CBLAS_CAT2(prefix, name) prefix##name
#define DUALCAST_DETAIL_CBLAS_CAT(prefix, name) DUALCAST_DETAIL_CBLAS_CAT2(prefix, name)
#define DUALCAST_DETAIL_CBLAS(name) DUALCAST_DETAIL_CBLAS_CAT(DUALCAST_CBLAS_PREFIX, name)
#else
#define DUALCAST_DETAIL_CBLAS(name) name
#endif

namespace dualcast::detail {

// Row-major C (m x n, leading dimension ldc) = op(A) op(B) + beta C; ta / tb: the operand is
// stored transposed.
template <class T>
void backend_gemm(hook, cpu const &, bool ta, bool tb, int m, int n, int k, T const *a, int lda,
                  T const *b, int ldb, T beta, T *c, int ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  auto tr = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  if constexpr (std::is_same_v<T, float>) {
    auto *sgemm = &DUALCAST_DETAIL_CBLAS(cblas_sgemm);
    sgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  } else {
    auto *dgemm = &DUALCAST_DETAIL_CBLAS(cblas_dgemm);
    dgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
  }
}

// `batch` products C_i = op(A_i) op(B_i) + beta C_i, X_i at x + i * stride_x (stride 0: shared);
// the C_i do not overlap. One gemm per entry, in order (each one parallel inside the BLAS).
template <class T>
void backend_gemm_batched(hook, cpu const &ex, bool ta, bool tb, int m, int n, int k, T const *a,
                          int lda, long long stride_a, T const *b, int ldb, long long stride_b,
                          T beta, T *c, int ldc, long long stride_c, int batch) {
  for (int i = 0; i < batch; ++i)
    backend_gemm(hook{}, ex, ta, tb, m, n, k, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                 c + i * stride_c, ldc);
}

} // namespace dualcast::detail
