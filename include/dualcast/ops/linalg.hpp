// dualcast/ops/linalg.hpp: matrix products on tape variables (CPU: BLAS gemm; CUDA tensors:
// cuBLAS, backend/cuda/blas.cuh), with NumPy's / PyTorch's matmul semantics.
//
//   auto c = dualcast::matmul(a, b);   // (m, k) @ (k, n), or batched (..., m, k) @ (..., k, n)
//
// Batch dimensions (all but the last two) broadcast against each other (a rank-2 operand, or one
// with extent 1 in a batch dimension, is shared by those batch entries). A 1-D operand is a
// matrix with one row (a: (k) as (1, k)) or one column (b: (k) as (k, 1)), and that dimension
// is removed from the result: vector @ matrix is (n), matrix @ vector (m), vector @ vector a
// scalar of shape (). Operands may be any strided views (transposes are passed to BLAS as
// transposed operands, other layouts are copied first). Backward: da += dc @ b^T,
// db += a^T @ dc, summed over the batch entries that share an operand. Needs BLAS at link time
// (cblas_sgemm / cblas_dgemm), and cuBLAS for CUDA tensors.
#pragma once

#include <dualcast/arrays/view_overlap.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/detail/tape_ops.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/gemm_backends.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <string>
#include <type_traits>

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

// The transposes of a matrix or of each matrix of a batch (a view).
template <class T> tensor<T> matrix_transpose(tensor<T> const &x) {
  return x.rank() == 2 ? x.transposed() : x.transposed(1, 2);
}

// A batch of matrices as a batched BLAS call sees it: entry i at ptr + i * stride (0: one matrix
// shared by every entry), each entry with the same transpose flag and leading dimension.
template <class T> struct blas_batch {
  blas_operand<T> entry; // entry 0
  tensor<T> keep;        // a contiguous copy when the entries' layout is not BLAS-compatible
  long long stride = 0;
};
template <class T> blas_batch<T> as_blas_batch(tensor<T> const &x) {
  blas_batch<T> o;
  if (x.rank() == 2) {
    o.entry = as_blas(x);
    return o;
  }
  o.entry = as_blas(x.select(0, 0));
  if (o.entry.keep.defined()) { // copy the whole batch once, not entry by entry
    o.keep = x.clone();
    o.entry = as_blas(o.keep.select(0, 0));
    o.stride = x.extent(0) > 1 ? o.keep.stride(0) : 0;
  } else {
    o.stride = x.extent(0) > 1 ? x.stride(0) : 0;
  }
  return o;
}

// C_i (m x n) = A_i @ B_i + beta * C_i for every entry i of C (rank 3, entries that do not
// overlap); a rank-2 A or B is shared by every entry. One strided-batched product (cuBLAS) where
// C's entries are BLAS-compatible rows with a constant stride; else one gemm per entry.
template <class T>
void gemm_batched(cpu const &host, tensor<T> const &a, tensor<T> const &b, tensor<T> const &c,
                  T beta) {
  index_t const batch = c.extent(0);
  int const m = int(c.extent(1)), n = int(c.extent(2));
  int const k = int(a.extent(a.rank() - 1));
  bool const c_rows = (n <= 1 || c.stride(2) == 1) && c.stride(1) >= n &&
                      (batch <= 1 || c.stride(0) >= c.stride(1) * m);
  if (batch <= 1 || m == 0 || n == 0 || k == 0 || !c_rows) {
    for (index_t i = 0; i < batch; ++i)
      gemm(host, batch_entry(a, i), batch_entry(b, i), c.select(0, i), beta);
    return;
  }
  auto A = as_blas_batch(a), B = as_blas_batch(b);
  int const ldc = int(std::max<index_t>(c.stride(1), n));
  on_device("dualcast::matmul", c.dev(), host, [&](auto const &ex) {
    backend_gemm_batched(hook{}, ex, A.entry.trans, B.entry.trans, m, n, k, A.entry.ptr, A.entry.ld,
                         A.stride, B.entry.ptr, B.entry.ld, B.stride, beta, c.raw_data(), ldc,
                         (long long)c.stride(0), int(batch));
  });
}

} // namespace detail

namespace detail {
// Shapes of a general matmul: the operands as (batch..., rows, cols) of the broadcast batch
// rank (leading extents 1 added, a 1-D operand made a row / a column), and the result.
struct matmul_shapes {
  shape pa, pb, batch, out;
  index_t m = 0, k = 0, n = 0;
};
inline matmul_shapes matmul_plan(char const *op, shape const &sa, shape const &sb) {
  auto fail = [&](char const *why) {
    throw shape_error(std::string(op) + ": shapes " + to_string(sa) + " and " + to_string(sb) +
                      why);
  };
  if (sa.rank < 1 || sb.rank < 1)
    fail(": operands must have rank 1 or more");
  matmul_shapes p;
  shape a = sa, b = sb;
  if (sa.rank == 1)
    a = shape{1, sa.ext[0]};
  if (sb.rank == 1)
    b = shape{sb.ext[0], 1};
  p.m = a.ext[a.rank - 2], p.k = a.ext[a.rank - 1], p.n = b.ext[b.rank - 1];
  if (p.k != b.ext[b.rank - 2])
    fail(" do not match for a matrix product");
  shape ba, bb;
  ba.rank = a.rank - 2, bb.rank = b.rank - 2;
  for (int d = 0; d < ba.rank; ++d)
    ba.ext[d] = a.ext[d];
  for (int d = 0; d < bb.rank; ++d)
    bb.ext[d] = b.ext[d];
  bool ok = true;
  p.batch = broadcast_pair(ba, bb, ok);
  if (!ok)
    fail(": batch dimensions do not broadcast");
  int const nb = p.batch.rank;
  auto padded = [nb](shape const &batch, index_t r, index_t c) {
    shape s;
    s.rank = nb + 2;
    for (int d = 0; d < nb; ++d)
      s.ext[d] = d < nb - batch.rank ? 1 : batch.ext[d - (nb - batch.rank)];
    s.ext[nb] = r, s.ext[nb + 1] = c;
    return s;
  };
  p.pa = padded(ba, p.m, p.k);
  p.pb = padded(bb, p.k, p.n);
  p.out = p.batch;
  if (sa.rank > 1)
    p.out.ext[p.out.rank++] = p.m;
  if (sb.rank > 1)
    p.out.ext[p.out.rank++] = p.n;
  return p;
}
// The entries of x (batch extents those of `batch` or 1) at outer batch coordinates o (row-major
// over all batch dimensions but the last): a batch over the last batch dimension, rank 3, or
// rank 2 (the one matrix) when x is shared along it, as gemm_batched takes its operands.
template <class T> tensor<T> last_batch(tensor<T> const &x, shape const &batch, index_t o) {
  tensor<T> r = x;
  for (int d = batch.rank - 2; d >= 0; --d) {
    index_t c = o % batch.ext[d];
    o /= batch.ext[d];
    r = r.select(d, x.extent(d) == 1 ? 0 : c);
  }
  return r.extent(0) == 1 && batch.ext[batch.rank - 1] != 1 ? r.select(0, 0) : r;
}
template <class T> tensor<T> maybe_transposed(tensor<T> const &x, bool t) {
  return t ? matrix_transpose(x) : x;
}
// gemm and gemm_batched on a tape over duals: (A + e A')(B + e B') = AB + e (A'B + AB'), the plain
// gemms of the parts (1 + 2K of them), so that the value has the plain tape's bits; beta is real
// (0 or 1). A term whose partial is zero throughout (a constant operand's, as the data of a loss
// and its transposes in backward) is skipped: it adds exact zeros, so the tangent is the same (up
// to the sign of a zero, and an infinite value times that zero no longer makes it NaN, as with
// sparse partials), and a matmul of a constant by a variable costs 2 gemms, not 3.
template <class R, int K, class G>
void dual_gemm_parts(tensor<dual<R, K>> const &a, tensor<dual<R, K>> const &b,
                     tensor<dual<R, K>> const &c, dual<R, K> const &beta, G const &plain_gemm) {
  // Each operand and the result taken apart, and the result put together, in one pass each; a
  // constant operand (the data X of a loss X W, X^T in backward) as its values alone, copied in
  // one pass that tests its partials (not a copy of its partials to be scanned afterwards).
  R const bv = beta.val;
  auto const parts_of = [](tensor<dual<R, K>> const &x) {
    std::array<tensor<R>, std::size_t(K + 1)> r;
    r[0] = dual_values_if_constant(x);
    if (!r[0].defined())
      r = dual_split_like(x);
    return r; // (a constant's partials undefined: zero)
  };
  auto const ap = parts_of(a), bp = parts_of(b);
  auto const live = [](tensor<R> const &part) { return part.defined() && !all_zero_part(part); };
  std::array<tensor<R>, std::size_t(K + 1)> cp;
  if (bv == R(0))
    for (auto &t : cp)
      t = tensor<R>::empty(c.dims(), c.dev());
  else
    cp = dual_split(c);
  tensor<R> const &av = ap[0], &bvv = bp[0];
  for (int p = -1; p < K; ++p) {
    tensor<R> &cq = cp[std::size_t(p + 1)];
    if (p < 0) {
      plain_gemm(av, bvv, cq, bv);
    } else {
      tensor<R> const &aq = ap[std::size_t(p + 1)], &bq = bp[std::size_t(p + 1)];
      bool const a_live = live(aq), b_live = live(bq);
      if (a_live)
        plain_gemm(aq, bvv, cq, bv);
      if (b_live)
        plain_gemm(av, bq, cq, a_live ? R(1) : bv);
      if (!a_live && !b_live && bv == R(0))
        cq = tensor<R>::zeros(c.dims(), c.dev());
    }
  }
  dual_join_into(c, cp);
}
template <class R, int K>
void gemm(cpu const &host, tensor<dual<R, K>> const &a, tensor<dual<R, K>> const &b,
          tensor<dual<R, K>> const &c, dual<R, K> beta) {
  dual_gemm_parts(a, b, c, beta, [&](auto const &x, auto const &y, auto const &z, R bt) {
    gemm(host, x, y, z, bt);
  });
}
template <class R, int K>
void gemm_batched(cpu const &host, tensor<dual<R, K>> const &a, tensor<dual<R, K>> const &b,
                  tensor<dual<R, K>> const &c, dual<R, K> beta) {
  dual_gemm_parts(a, b, c, beta, [&](auto const &x, auto const &y, auto const &z, R bt) {
    gemm_batched(host, x, y, z, bt);
  });
}

// C = A @ B over a broadcast batch (pa, pb, C with the batch's rank; C fresh): one strided-batched
// product per outer entry, over the last batch dimension (the entries in the same order as one
// gemm each: the same bits on the CPU).
template <class T>
void broadcast_gemm(cpu const &host, shape const &batch, tensor<T> const &pa, tensor<T> const &pb,
                    tensor<T> const &C) {
  if (batch.rank == 0) {
    gemm(host, pa, pb, C, T(0));
    return;
  }
  index_t const last = batch.ext[batch.rank - 1];
  for (index_t o = 0; last > 0 && o < batch.size() / last; ++o)
    gemm_batched(host, last_batch(pa, batch, o), last_batch(pb, batch, o), last_batch(C, batch, o),
                 T(0));
}
// sum over the batch entries of op(L_i) @ op(R_i), in a fresh tensor of shape `target` (whose
// batch extents are those of `batch` or 1: entries sharing it are summed, in entry order). Per
// outer entry: one strided-batched product when each entry has its own target matrix, else the
// shared target's gemms in order.
template <class T>
tensor<T> batched_gemm_sum(cpu const &host, shape const &batch, shape const &target,
                           tensor<T> const &l, bool lt, tensor<T> const &r, bool rt) {
  tensor<T> g = tensor<T>::zeros(target, l.dev());
  if (batch.rank == 0) {
    gemm(host, maybe_transposed(l, lt), maybe_transposed(r, rt), g, T(1));
    return g;
  }
  index_t const last = batch.ext[batch.rank - 1];
  for (index_t o = 0; last > 0 && o < batch.size() / last; ++o) {
    tensor<T> li = last_batch(l, batch, o), ri = last_batch(r, batch, o),
              gi = last_batch(g, batch, o);
    if (gi.rank() == 3) {
      gemm_batched(host, maybe_transposed(li, lt), maybe_transposed(ri, rt), gi, T(1));
    } else {
      for (index_t j = 0; j < last; ++j)
        gemm(host, maybe_transposed(batch_entry(li, j), lt),
             maybe_transposed(batch_entry(ri, j), rt), gi, T(1));
    }
  }
  return g;
}

// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T)                                                                              \
  DUALCAST_INSTANTIATE void gemm<T>(cpu const &, tensor<T> const &, tensor<T> const &,             \
                                    tensor<T> const &, T);                                         \
  DUALCAST_INSTANTIATE void gemm_batched<T>(cpu const &, tensor<T> const &, tensor<T> const &,     \
                                            tensor<T> const &, T);                                 \
  DUALCAST_INSTANTIATE void broadcast_gemm<T>(cpu const &, shape const &, tensor<T> const &,       \
                                              tensor<T> const &, tensor<T> const &);               \
  DUALCAST_INSTANTIATE tensor<T> batched_gemm_sum<T>(cpu const &, shape const &, shape const &,    \
                                                     tensor<T> const &, bool, tensor<T> const &,   \
                                                     bool);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
} // namespace detail

namespace detail {
// matmul on two variables: one function per element type (not per operand expression), which
// the compiled component holds (dualcast/core/compiled.hpp).
template <class T> var<T> matmul_var(var<T> const &a, var<T> const &b) {
  char const *op = "dualcast::matmul";
  shape const sa = a.dims(), sb = b.dims();
  int ra = sa.rank, rb = sb.rank;
  auto const plan = detail::matmul_plan(op, sa, sb);
  // Ranks 2 and 3 with equal batches (or one rank-2 operand) write the gradients in place;
  // the rest (1-D operands, batch extents 1 against B, batch ranks above 1) go through
  // batched_gemm_sum.
  if (ra < 2 || ra > 3 || rb < 2 || rb > 3 || (ra == 3 && rb == 3 && sa.ext[0] != sb.ext[0]))
    return custom_op(
        "matmul",
        [&](auto const &, auto &ctx, tensor<T> const &A, tensor<T> const &B) {
          tensor<T> pa = A.reshape(plan.pa), pb = B.reshape(plan.pb);
          shape cs = plan.batch;
          cs.ext[cs.rank++] = plan.m, cs.ext[cs.rank++] = plan.n;
          tensor<T> C = tensor<T>::empty(cs, A.dev());
          detail::broadcast_gemm(ctx.host(), plan.batch, pa, pb, C);
          ctx.save(b.requires_grad() ? pa : tensor<T>{}, "operand 0 (a)");
          ctx.save(a.requires_grad() ? pb : tensor<T>{}, "operand 1 (b)");
          return C.reshape(plan.out);
        },
        [plan, ga = a.requires_grad(), sb](auto const &, auto const &ctx, auto &g) {
          shape cs = plan.batch;
          cs.ext[cs.rank++] = plan.m, cs.ext[cs.rank++] = plan.n;
          tensor<T> gy = g.out(0).contiguous().reshape(cs);
          std::size_t next = 0;
          tensor<T> A = g.needs(1) ? ctx.saved(next++) : tensor<T>{};
          tensor<T> B = ga ? ctx.saved(next) : tensor<T>{};
          if (g.needs(0)) // dA = dC @ B^T, summed where A is shared
            g.add(0, detail::batched_gemm_sum(g.host(), plan.batch, plan.pa, gy, false, B, true));
          if (g.needs(1)) { // dB = A^T @ dC
            tensor<T> db =
                detail::batched_gemm_sum(g.host(), plan.batch, plan.pb, A, true, gy, false);
            if (sb.rank == 1) { // (..., k, 1) -> (..., k), which (k) broadcasts to
              shape s = plan.pb;
              s.rank -= 1;
              db = db.reshape(s);
            }
            g.add(1, db);
          }
        },
        a, b);
  index_t m = plan.m, n = plan.n;
  index_t batch = ra == 3 ? sa.ext[0] : (rb == 3 ? sb.ext[0] : 1);
  bool batched = ra == 3 || rb == 3;
  return custom_op(
      "matmul",
      [&](auto const &, auto &ctx, tensor<T> const &A, tensor<T> const &B) {
        tensor<T> C = tensor<T>::empty(batched ? shape{batch, m, n} : shape{m, n}, A.dev());
        if (batched)
          detail::gemm_batched(ctx.host(), A, B, C, T(0));
        else
          detail::gemm(ctx.host(), A, B, C, T(0));
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
        // The targets (gradient, whether to add to it) first, then the products; both of two
        // matrices (float or double) side by side where the targets share no element.
        using target_t = std::pair<tensor<T>, bool>;
        target_t const ta = g.needs(0) ? g.target(0) : target_t{};
        target_t const tb = g.needs(1) ? g.target(1) : target_t{};
        auto const da = [&] { // dA = dC @ B^T
          auto const &[t, acc] = ta;
          if (batch == 0 && !acc) // an operand shared by an empty batch: nothing adds to it
            t.assign_raw(tensor<T>::zeros(shape{}, t.dev()));
          if (ra == 3) // one target per entry: a batched product
            detail::gemm_batched(g.host(), gy, detail::matrix_transpose(B), t, acc ? T(1) : T(0));
          for (index_t i = 0; ra == 2 && i < batch; ++i) // a shared target: summed in order
            detail::gemm(g.host(), detail::batch_entry(gy, i),
                         detail::batch_entry(B, i).transposed(), t, acc || i > 0 ? T(1) : T(0));
        };
        auto const db = [&] { // dB = A^T @ dC
          auto const &[t, acc] = tb;
          if (batch == 0 && !acc)
            t.assign_raw(tensor<T>::zeros(shape{}, t.dev()));
          if (rb == 3)
            detail::gemm_batched(g.host(), detail::matrix_transpose(A), gy, t, acc ? T(1) : T(0));
          for (index_t i = 0; rb == 2 && i < batch; ++i)
            detail::gemm(g.host(), detail::batch_entry(A, i).transposed(),
                         detail::batch_entry(gy, i), t, acc || i > 0 ? T(1) : T(0));
        };
        if (std::is_floating_point_v<T> && ra == 2 && rb == 2 && g.needs(0) && g.needs(1) &&
            ta.first.dev().is_host() && tb.first.dev().is_host() &&
            !overlaps(ta.first.cview(), tb.first.cview())) {
          detail::side_by_side(g.host(), da, db);
        } else {
          if (g.needs(0))
            da();
          if (g.needs(1))
            db();
        }
      },
      a, b);
}
#define DUALCAST_X(T) DUALCAST_INSTANTIATE var<T> matmul_var<T>(var<T> const &, var<T> const &);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X
} // namespace detail

template <var_like XA, var_like XB> auto matmul(XA const &a_in, XB const &b_in) {
  static_assert(std::is_same_v<typename detail::var_of_t<XA>::value_type,
                               typename detail::var_of_t<XB>::value_type>,
                "dualcast::matmul: operands of one element type (cast one: dualcast::cast)");
  return detail::matmul_var(detail::as_var(a_in), detail::as_var(b_in));
}

namespace detail {
// g (float) added to a 16-bit variable's gradient: in float, rounded once.
template <class T16>
void add_float_grad(grad_slot<T16> &s, tensor<float> const &g, cpu const &host) {
  auto const target = grad_target(s); // (no structured binding: clang 14 cannot capture it)
  tensor<T16> const &t = target.first;
  if (target.second)
    on_device("dualcast::matmul", s.dev, host, [&](auto const &ex) {
      apply(ex, add_kernel, out(t.raw_view()), t.cview(), g.cview());
    });
  else
    t.assign_raw(converted<T16>(g, host));
}

// matmul of two 16-bit operands, any ranks (1-D vectors, batches broadcast as matmul_plan says):
// the operands widened to float temporaries, the float gemms (float accumulation; a batch through
// broadcast_gemm, as the float operation), the product rounded once. The node keeps the 16-bit
// operands (the variables' own storage, version-checked), not float copies: backward widens them
// again for its gemms (batched_gemm_sum: summed in float over the entries that share an operand),
// in float, and adds the float gradients into the 16-bit ones, rounded once.
template <class T16> var<T16> matmul_var16(var<T16> const &a, var<T16> const &b) {
  char const *op = "dualcast::matmul";
  tape *tp = tape_of(op, a, b);
  cpu const host = tp ? tp->ex : ambient_cpu();
  device const dev = common_device(op, a.value().dev(), b.value().dev());
  auto const on_stream = tape_stream_scope(tp, dev);
  auto const plan = matmul_plan(op, a.dims(), b.dims()); // (the shapes' checks and messages)
  shape cs = plan.batch; // the product as the gemms see it: batch, m, n
  cs.ext[cs.rank++] = plan.m, cs.ext[cs.rank++] = plan.n;
  tensor<float> c = tensor<float>::empty(cs, dev);
  broadcast_gemm(host, plan.batch, converted<float>(a.value(), host).contiguous().reshape(plan.pa),
                 converted<float>(b.value(), host).contiguous().reshape(plan.pb), c);
  tensor<T16> y = converted<T16>(c, host).reshape(plan.out);
  bool const ga = a.requires_grad(), gb = b.requires_grad();
  if (!tp || !(ga || gb) || !tp->grad_enabled())
    return var<T16>(std::move(y), nullptr, tp);
  var<T16> r = tp->make_output(std::move(y), true);
  arena_array<saved_tensor> saves(tp->node_memory(), 2);
  saves[0] = save(a.value(), "operand 0 (a)");
  saves[1] = save(b.value(), "operand 1 (b)");
  tp->record_static<T16, 1>(
      "matmul (16-bit operands)", {r.slot()},
      [A = a.value(), B = b.value(), sa = a.slot(), sb = b.slot(), ga, gb, plan, cs,
       host](std::array<std::shared_ptr<grad_slot<T16>>, 1> const &os) {
        tensor<float> const gy = converted<float>(out_grad(*os[0]), host).contiguous().reshape(cs);
        if (ga) { // dA = dC @ B^T, summed where A is shared
          tensor<float> const Bf = converted<float>(B, host).contiguous().reshape(plan.pb);
          add_float_grad(
              *sa,
              batched_gemm_sum(host, plan.batch, plan.pa, gy, false, Bf, true).reshape(A.dims()),
              host);
        }
        if (gb) { // dB = A^T @ dC, summed where B is shared
          tensor<float> const Af = converted<float>(A, host).contiguous().reshape(plan.pa);
          add_float_grad(
              *sb,
              batched_gemm_sum(host, plan.batch, plan.pb, Af, true, gy, false).reshape(B.dims()),
              host);
        }
      },
      std::move(saves));
  return r;
}
} // namespace detail

// Over bfloat16 / half: both operands widened to float and the float gemm (float accumulation),
// the product rounded once, for every rank matmul takes: one node that keeps the 16-bit operands
// (detail::matmul_var16), no cast nodes. No 16-bit gemm (sbgemm, cublasGemmEx) is called yet.
template <var_like XA, var_like XB>
requires(detail::float16_operand<XA>() || detail::float16_operand<XB>()) auto matmul(XA const &a,
                                                                                     XB const &b) {
  static_assert(std::is_same_v<typename detail::var_of_t<XA>::value_type,
                               typename detail::var_of_t<XB>::value_type>,
                "dualcast::matmul: operands of one element type (cast one: dualcast::cast)");
  return detail::matmul_var16(detail::as_var(a), detail::as_var(b));
}

} // namespace dualcast
