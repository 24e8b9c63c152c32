// dualcast/backend/cpu/blas.hpp: the CPU backend's matrix product hook, through CBLAS (link a
// BLAS: the dualcast::dualcast target links the one CMake finds). Kept out of backend/cpu.hpp so
// that only programs using matmul need <cblas.h>.
#pragma once

#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/backend/seam.hpp>

#include <cblas.h>

#include <type_traits>

namespace dualcast::detail {

// Row-major C (m x n, leading dimension ldc) = op(A) op(B) + beta C; ta / tb: the operand is
// stored transposed.
template <class T>
void backend_gemm(hook, cpu const &, bool ta, bool tb, int m, int n, int k, T const *a, int lda,
                  T const *b, int ldb, T beta, T *c, int ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  auto tr = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

} // namespace dualcast::detail
