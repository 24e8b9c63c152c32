// dualcast/ops/linalg.hpp: matrix products on tape variables (CPU: BLAS gemm; CUDA tensors:
// cuBLAS, backend/cuda/blas.cuh).
//
//   auto c = dualcast::matmul(a, b);   // (m, k) @ (k, n), or batched (B, m, k) @ (B, k, n);
//                                      // a rank-2 operand is shared by every batch entry
//
// Operands may be any strided views (transposes are passed to BLAS as transposed operands, other
// layouts are copied first). Backward: da += dc @ b^T, db += a^T @ dc (summed over the batch for
// a shared operand). Needs BLAS at link time (cblas_sgemm / cblas_dgemm), and cuBLAS for CUDA
// tensors.
#pragma once

#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <cblas.h>

#include <string>

namespace dualcast {

namespace detail {

// Row-major C (m x n) = op(A) op(B) + beta C on the CPU (the CUDA overload: backend/cuda/tape.cuh).
template <class T>
void backend_gemm(hook, cpu const &, bool ta, bool tb, int m, int n, int k, T const *a, int lda,
                  T const *b, int ldb, T beta, T *c, int ldc) {
  auto tr = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

// A 2-D operand as BLAS sees it (row-major): pointer, transpose flag and leading dimension.
template <class T> struct blas_operand {
  tensor<T> keep; // a contiguous copy when the layout is not BLAS-compatible
  T const *ptr = nullptr;
  bool trans = false;
  int ld = 1;
};
template <class T> blas_operand<T> as_blas(tensor<T> const &m) {
  blas_operand<T> o;
  index_t r = m.extent(0), c = m.extent(1);
  if (m.stride(1) == 1 && m.stride(0) >= (c > 1 ? c : 1)) {
    o.ptr = m.data(), o.trans = false, o.ld = int(m.stride(0) > 1 ? m.stride(0) : 1);
  } else if (m.stride(0) == 1 && m.stride(1) >= (r > 1 ? r : 1)) {
    o.ptr = m.data(), o.trans = true, o.ld = int(m.stride(1) > 1 ? m.stride(1) : 1);
  } else {
    o.keep = m.clone();
    o.ptr = o.keep.data(), o.trans = false, o.ld = int(c > 1 ? c : 1);
  }
  return o;
}

// C (m x n) = A @ B + beta * C (beta 0 or 1), all 2-D, on C's device. C is written in place
// when its rows are BLAS-compatible (unit column stride), else through a contiguous temporary
// (a gradient that is a strided slice of a larger one).
template <class T>
void gemm(cpu const &host, tensor<T> const &a, tensor<T> const &b, tensor<T> const &c, T beta) {
  int m = int(a.extent(0)), k = int(a.extent(1)), n = int(b.extent(1));
  if (m == 0 || n == 0)
    return;
  if (n > 1 && c.stride(1) != 1) {
    tensor<T> tmp = tensor<T>::empty(c.dims(), c.dev());
    gemm(host, a, b, tmp, T(0));
    if (beta == T(0))
      c.assign_raw(tmp);
    else
      add_into(c, tmp);
    return;
  }
  if (k == 0) {
    if (beta == T(0))
      c.assign_raw(tensor<T>::zeros(shape{}, c.dev()));
    return;
  }
  auto A = as_blas(a), B = as_blas(b);
  int ldc = int(c.stride(0) > 0 ? c.stride(0) : 1);
  if (ldc < n)
    ldc = n;
  on_device("dualcast::matmul", c.dev(), host, [&](auto const &ex) {
    backend_gemm(hook{}, ex, A.trans, B.trans, m, n, k, A.ptr, A.ld, B.ptr, B.ld, beta, c.data(),
                 ldc);
  });
}

template <class T> tensor<T> batch_entry(tensor<T> const &x, index_t i) {
  return x.rank() == 2 ? x : x.select(0, i);
}

} // namespace detail

template <class T> var<T> matmul(var<T> const &a, var<T> const &b) {
  char const *op = "dualcast::matmul";
  tape *tp = detail::tape_of(op, a, b);
  tensor<T> A = a.value(), B = b.value();
  int ra = A.rank(), rb = B.rank();
  if (ra < 2 || ra > 3 || rb < 2 || rb > 3)
    throw shape_error(std::string(op) + ": operands must have rank 2 or 3, got shapes " +
                      to_string(A.dims()) + " and " + to_string(B.dims()));
  index_t m = A.extent(ra - 2), k = A.extent(ra - 1), k2 = B.extent(rb - 2), n = B.extent(rb - 1);
  index_t batch = ra == 3 ? A.extent(0) : (rb == 3 ? B.extent(0) : 1);
  if (k != k2 || (ra == 3 && rb == 3 && A.extent(0) != B.extent(0)))
    throw shape_error(std::string(op) + ": shapes " + to_string(A.dims()) + " and " +
                      to_string(B.dims()) + " do not match for a matrix product");
  bool batched = ra == 3 || rb == 3;
  device dev = detail::device_of(op, a, b);
  cpu host = tp ? tp->ex : cpu{};
  tensor<T> C = tensor<T>::empty(batched ? shape{batch, m, n} : shape{m, n}, dev);
  for (index_t i = 0; i < batch; ++i)
    detail::gemm(host, detail::batch_entry(A, i), detail::batch_entry(B, i),
                 detail::batch_entry(C, i), T(0));

  auto sa = a.slot(), sb = b.slot();
  std::vector<std::pair<tensor<T>, std::string>> saves;
  if (sb)
    saves.push_back({A, "operand 0 (a)"});
  if (sa)
    saves.push_back({B, "operand 1 (b)"});
  return detail::record_op<T>(
      "matmul", tp, C, sa || sb,
      [sa, sb, A = sb ? A : tensor<T>{}, B = sa ? B : tensor<T>{}, batch, ra, rb,
       host](tensor<T> gy) {
        gy = gy.contiguous();
        if (sa) { // dA = dC @ B^T
          auto [g, acc] = tape::grad_target(*sa);
          for (index_t i = 0; i < batch; ++i) {
            bool accumulate = acc || (ra == 2 && i > 0);
            detail::gemm(host, detail::batch_entry(gy, i), detail::batch_entry(B, i).transposed(),
                         detail::batch_entry(g, ra == 3 ? i : 0), accumulate ? T(1) : T(0));
          }
        }
        if (sb) { // dB = A^T @ dC
          auto [g, acc] = tape::grad_target(*sb);
          for (index_t i = 0; i < batch; ++i) {
            bool accumulate = acc || (rb == 2 && i > 0);
            detail::gemm(host, detail::batch_entry(A, i).transposed(), detail::batch_entry(gy, i),
                         detail::batch_entry(g, rb == 3 ? i : 0), accumulate ? T(1) : T(0));
          }
        }
      },
      saves);
}

} // namespace dualcast
