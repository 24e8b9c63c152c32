// dualcast/backend/cpu/blas.hpp: the CPU backend's matrix product hook, through CBLAS (link a
// BLAS: the dualcast::dualcast target links the one CMake finds). Kept out of backend/cpu.hpp so
// that only programs using matmul need <cblas.h>.
#pragma once

#include <dualcast/backend/cpu/executor.hpp>
#include <dualcast/backend/seam.hpp>

#include <cblas.h>

#include <exception>
#include <type_traits>
#if defined(_OPENMP)
#include <omp.h>
#endif

// A CBLAS whose symbols carry a prefix (the scipy-openblas wheels export scipy_cblas_sgemm):
// -DDUALCAST_CBLAS_PREFIX=scipy_ (CMake's DUALCAST_SCIPY_OPENBLAS_DIR sets it).
#ifdef DUALCAST_CBLAS_PREFIX
#define DUALCAST_DETAIL_CBLAS_CAT2(prefix, name) prefix##name
#define DUALCAST_DETAIL_CBLAS_CAT(prefix, name) DUALCAST_DETAIL_CBLAS_CAT2(prefix, name)
#define DUALCAST_DETAIL_CBLAS(name) DUALCAST_DETAIL_CBLAS_CAT(DUALCAST_CBLAS_PREFIX, name)
#else
#define DUALCAST_DETAIL_CBLAS(name) name
#endif

// OpenBLAS's threading model (0 serial, 1 pthreads, 2 OpenMP), where the BLAS is OpenBLAS: a weak
// reference, null with another BLAS.
extern "C" int DUALCAST_DETAIL_CBLAS(openblas_get_parallel)() __attribute__((weak));

namespace dualcast::detail {

// Whether a gemm called inside an OpenMP parallel region runs on the calling thread alone: an
// OpenMP build of OpenBLAS does (it tests omp_in_parallel). Another BLAS may start threads of its
// own from each caller, or is not known to: false.
inline bool blas_runs_nested_serially() {
  auto *parallel = &DUALCAST_DETAIL_CBLAS(openblas_get_parallel);
  return parallel != nullptr && parallel() == 2;
}

// fa() and fb(), each a gemm call or a few, at the same time on two threads of ex, each gemm on its
// thread alone, where the BLAS allows it (blas_runs_nested_serially) and ex has two threads; else
// one after the other. The caller makes sure they write different memory. Two gemms on one core
// each ran faster than the same two one after the other on both cores: the backward of an LSTM
// step's recurrent matmul (dW = h^T dG and dh = dG W^T, 256 x 4096 x 1024) 10.8 -> 9.9 ms, the
// char-LSTM's (64 x 2048 x 512) 0.95 -> 0.79 ms (AMD Zen 4, OpenBLAS 0.3.21): a gemm is further
// from the FMA peak on two threads than on one (74-85 % against 84-91 %).
template <class FA, class FB> void side_by_side(cpu const &ex, FA const &fa, FB const &fb) {
#if defined(_OPENMP)
  if (ex.thread_count() >= 2 && !omp_in_parallel() && blas_runs_nested_serially()) {
    std::exception_ptr failed[2];
#pragma omp parallel num_threads(2)
    {
      int const t = omp_get_thread_num();
      try {
        if (t == 0) {
          fa();
          if (omp_get_num_threads() < 2) // (a team of one: OMP_THREAD_LIMIT, say)
            fb();
        } else if (t == 1) {
          fb();
        }
      } catch (...) {
        failed[t] = std::current_exception();
      }
    }
    for (auto const &e : failed)
      if (e)
        std::rethrow_exception(e);
    return;
  }
#else
  (void)ex;
#endif
  fa();
  fb();
}

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
