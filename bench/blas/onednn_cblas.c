/* bench/blas/onednn_cblas.c: oneDNN's dnnl_sgemm behind the CBLAS call the tape's matmul makes
 * (cblas_sgemm, row-major), so that bench/blas/choose can run the whole LSTM and char-LSTM steps
 * with oneDNN's gemms: built as a shared library and preloaded, it takes the binaries' calls of
 * cblas_sgemm; cblas_dgemm and the rest stay with the BLAS they were linked to (oneDNN has no
 * double gemm and no CBLAS of its own). Column-major calls, which the tape never makes, go on to
 * that BLAS too. */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                         const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                         const float, const float *, const blasint, const float *, const blasint,
                         const float, float *, const blasint);

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                 const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                 const float alpha, const float *a, const blasint lda, const float *b,
                 const blasint ldb, const float beta, float *c, const blasint ldc) {
  if (order != CblasRowMajor) {
    static sgemm_fn next;
    if (!next)
      next = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    if (!next) {
      fprintf(stderr, "onednn_cblas: no cblas_sgemm to pass a column-major call on to\n");
      abort();
    }
    next(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  dnnl_status_t const s = dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m,
                                     n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (s != dnnl_success) {
    fprintf(stderr, "onednn_cblas: dnnl_sgemm failed (status %d)\n", (int)s);
    abort();
  }
}
