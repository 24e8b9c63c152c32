// dualcast/ops/softmax.hpp: numerically stable softmax, log_softmax and logsumexp along one axis.
//
//   softmax(x, axis)      y = exp(x - m) / sum exp(x - m)            (m = max along the axis)
//   log_softmax(x, axis)  y = x - logsumexp(x)
//   logsumexp(x, axis, keepdims)  m + log(sum exp(x - m))
// Backward: softmax gx = y * (gy - sum(gy * y)); log_softmax gx = gy - softmax(x) * sum(gy);
// logsumexp gx = gy * exp(x - y). One row is one call of a function object shared by the CPU
// backend (rows in parallel with OpenMP) and the CUDA backend (one thread per row).
#pragma once

#include <dualcast/detail/tape_ops.hpp>
#include <dualcast/math.hpp>
#include <dualcast/tape.hpp>
#include <dualcast/tensor.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace dualcast {

namespace detail {

// x with `axis` moved last, as a contiguous (rows, n) array, plus the permutation used.
template <class T> struct rows_view {
  tensor<T> data; // contiguous, the permuted shape
  std::vector<int> perm;
  index_t rows = 0, n = 0;
};
template <class T> rows_view<T> axis_last(char const *op, tensor<T> const &x, int axis) {
  rows_view<T> r;
  int ax = normalize_axis(op, axis, x.rank());
  for (int i = 0; i < x.rank(); ++i)
    if (i != ax)
      r.perm.push_back(i);
  r.perm.push_back(ax);
  r.data = x.permuted(r.perm).contiguous();
  r.n = x.extent(ax);
  r.rows = r.n > 0 ? x.size() / r.n : 0;
  return r;
}
// A contiguous result in the permuted layout, seen in x's layout (a view).
template <class T> tensor<T> from_rows(tensor<T> const &t, std::vector<int> const &perm) {
  return t.permuted(inverse_perm(perm));
}

// Row r of x (n contiguous values). mode 0: softmax, 1: log_softmax, 2: logsumexp (out has one
// value per row).
template <class T> struct softmax_row {
  T const *x;
  T *out;
  index_t n;
  int mode;
  DUALCAST_HD void operator()(index_t r) const {
    T const *xr = x + r * n;
    T m = xr[0];
    for (index_t j = 1; j < n; ++j)
      m = xr[j] > m ? xr[j] : m;
    T s = 0;
    for (index_t j = 0; j < n; ++j)
      s += dualcast::exp(xr[j] - m);
    T lse = m + dualcast::log(s);
    if (mode == 2) {
      out[r] = lse;
    } else {
      T *o = out + r * n;
      for (index_t j = 0; j < n; ++j)
        o[j] = mode == 0 ? dualcast::exp(xr[j] - lse) : xr[j] - lse;
    }
  }
};
// The adjoint of row r: G the output gradient (one value per row for logsumexp), Y the result,
// X the input (logsumexp only), O the input gradient.
template <class T> struct softmax_row_backward {
  T const *Y, *G, *X;
  T *O;
  index_t n;
  int mode;
  DUALCAST_HD void operator()(index_t r) const {
    if (mode == 0) {
      T dot = 0;
      for (index_t j = 0; j < n; ++j)
        dot += G[r * n + j] * Y[r * n + j];
      for (index_t j = 0; j < n; ++j)
        O[r * n + j] = Y[r * n + j] * (G[r * n + j] - dot);
    } else if (mode == 1) {
      T s = 0;
      for (index_t j = 0; j < n; ++j)
        s += G[r * n + j];
      for (index_t j = 0; j < n; ++j)
        O[r * n + j] = G[r * n + j] - dualcast::exp(Y[r * n + j]) * s;
    } else {
      for (index_t j = 0; j < n; ++j)
        O[r * n + j] = G[r] * dualcast::exp(X[r * n + j] - Y[r]);
    }
  }
};

template <class T>
var<T> softmax_like(char const *op, var<T> const &x, int axis, int mode, bool keepdims = false) {
  auto rv = axis_last(op, x.value(), axis);
  shape ps = rv.data.dims();
  shape ys = ps;
  if (mode == 2)
    ys.ext[ys.rank - 1] = 1;
  device dev = x.value().dev();
  tensor<T> yp = tensor<T>::empty(ys, dev);
  if (rv.n == 0)
    throw shape_error(std::string(op) + ": the axis is empty in shape " + to_string(x.dims()));
  cpu host = x.owner() ? x.owner()->ex : cpu{};
  on_device(op, dev, host, [&](auto const &ex) {
    parallel_for(ex, rv.rows, 4 * rv.n, softmax_row<T>{rv.data.data(), yp.data(), rv.n, mode});
  });
  tensor<T> y = from_rows(yp, rv.perm);
  if (mode == 2 && !keepdims) {
    int ax = normalize_axis(op, axis, x.rank());
    shape s;
    for (int i = 0; i < x.rank(); ++i)
      if (i != ax)
        s.ext[s.rank++] = x.dims().ext[i];
    y = yp.reshape(s);
  }
  auto sx = x.slot();
  index_t rows = rv.rows, n = rv.n;
  auto perm = rv.perm;
  tensor<T> xp = mode == 2 ? rv.data : tensor<T>{}; // logsumexp needs x
  std::vector<std::pair<tensor<T>, std::string>> saves{{yp, "result"}};
  if (mode == 2)
    saves.push_back({x.value(), "input"});
  return record_op<T>(
      mode == 0   ? "softmax"
      : mode == 1 ? "log_softmax"
                  : "logsumexp",
      x.owner(), y, bool(sx),
      [sx, yp, xp, rows, n, perm, mode, host, op](tensor<T> gy) {
        // gy in the permuted contiguous layout
        shape gs = yp.dims();
        tensor<T> g = mode == 2 ? gy.contiguous().reshape(gs) : gy.permuted(perm).contiguous();
        tensor<T> gx = tensor<T>::empty(xp.defined() ? xp.dims() : yp.dims(), sx->dev);
        on_device(op, sx->dev, host, [&](auto const &ex) {
          parallel_for(ex, rows, 4 * n,
                       softmax_row_backward<T>{yp.data(), g.data(), xp.data(), gx.data(), n, mode});
        });
        tape::accumulate_grad(sx, from_rows(gx, perm));
      },
      saves);
}
} // namespace detail

template <class T> var<T> softmax(var<T> const &x, int axis = -1) {
  return detail::softmax_like("dualcast::softmax", x, axis, 0);
}
template <class T> var<T> log_softmax(var<T> const &x, int axis = -1) {
  return detail::softmax_like("dualcast::log_softmax", x, axis, 1);
}
template <class T> var<T> logsumexp(var<T> const &x, int axis = -1, bool keepdims = false) {
  return detail::softmax_like("dualcast::logsumexp", x, axis, 2, keepdims);
}

} // namespace dualcast
