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

#include <dualcast/custom_op.hpp>
#include <dualcast/detail/gemm_backends.hpp>
#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <string>

namespace dualcast {

namespace detail {

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
    backend_gemm(hook{}, ex, A.trans, B.trans, m, n, k, A.ptr, A.ld, B.ptr, B.ld, beta,
                 c.raw_data(), ldc);
  });
}

template <class T> tensor<T> batch_entry(tensor<T> const &x, index_t i) {
  return x.rank() == 2 ? x : x.select(0, i);
}

} // namespace detail

template <var_like XA, var_like XB> auto matmul(XA const &a_in, XB const &b_in) {
  using T = typename detail::var_of_t<XA>::value_type;
  char const *op = "dualcast::matmul";
  auto const &a = detail::as_var(a_in);
  auto const &b = detail::as_var(b_in);
  shape const sa = a.dims(), sb = b.dims();
  int ra = sa.rank, rb = sb.rank;
  if (ra < 2 || ra > 3 || rb < 2 || rb > 3)
    throw shape_error(std::string(op) + ": operands must have rank 2 or 3, got shapes " +
                      to_string(sa) + " and " + to_string(sb));
  index_t m = sa.ext[ra - 2], k = sa.ext[ra - 1], k2 = sb.ext[rb - 2], n = sb.ext[rb - 1];
  index_t batch = ra == 3 ? sa.ext[0] : (rb == 3 ? sb.ext[0] : 1);
  if (k != k2 || (ra == 3 && rb == 3 && sa.ext[0] != sb.ext[0]))
    throw shape_error(std::string(op) + ": shapes " + to_string(sa) + " and " + to_string(sb) +
                      " do not match for a matrix product");
  bool batched = ra == 3 || rb == 3;
  return custom_op(
      "matmul",
      [&](auto const &, auto &ctx, tensor<T> const &A, tensor<T> const &B) {
        tensor<T> C = tensor<T>::empty(batched ? shape{batch, m, n} : shape{m, n}, A.dev());
        for (index_t i = 0; i < batch; ++i)
          detail::gemm(ctx.host(), detail::batch_entry(A, i), detail::batch_entry(B, i),
                       detail::batch_entry(C, i), T(0));
        // dA needs B, dB needs A
        ctx.save(b.requires_grad() ? A : tensor<T>{}, "operand 0 (a)");
        ctx.save(a.requires_grad() ? B : tensor<T>{}, "operand 1 (b)");
        return C;
      },
      [batch, ra, rb, ga = a.requires_grad()](auto const &, auto const &ctx, auto &g) {
        tensor<T> gy = g.out(0).contiguous();
        std::size_t next = 0;
        tensor<T> A = g.needs(1) ? ctx.saved(next++) : tensor<T>{};
        tensor<T> B = ga ? ctx.saved(next) : tensor<T>{};
        if (g.needs(0)) { // dA = dC @ B^T
          auto [t, acc] = g.target(0);
          if (batch == 0 && !acc) // an operand shared by an empty batch: nothing adds to it
            t.assign_raw(tensor<T>::zeros(shape{}, t.dev()));
          for (index_t i = 0; i < batch; ++i) {
            bool accumulate = acc || (ra == 2 && i > 0);
            detail::gemm(g.host(), detail::batch_entry(gy, i),
                         detail::batch_entry(B, i).transposed(),
                         detail::batch_entry(t, ra == 3 ? i : 0), accumulate ? T(1) : T(0));
          }
        }
        if (g.needs(1)) { // dB = A^T @ dC
          auto [t, acc] = g.target(1);
          if (batch == 0 && !acc)
            t.assign_raw(tensor<T>::zeros(shape{}, t.dev()));
          for (index_t i = 0; i < batch; ++i) {
            bool accumulate = acc || (rb == 2 && i > 0);
            detail::gemm(g.host(), detail::batch_entry(A, i).transposed(),
                         detail::batch_entry(gy, i), detail::batch_entry(t, rb == 3 ? i : 0),
                         accumulate ? T(1) : T(0));
          }
        }
      },
      a, b);
}

} // namespace dualcast
