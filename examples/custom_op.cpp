// A tape operation of your own with dualcast::custom_op: normalising each row of a matrix to unit
// length, y = x / |x|, with its backward gx = (gy - y (y . gy)) / |x| -- written outside the
// library, device-generic (dualcast::for_each with function objects), and checked here against
// central differences through the tape.
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace dc = dualcast;

namespace my_ops {

// Row r of x (n contiguous values): y = x / |x|, and |x| kept for backward.
template <class T> struct normalize_row {
  T const *x;
  T *y, *norm;
  dc::index_t n;
  DUALCAST_HD void operator()(dc::index_t r) const {
    T s = 0;
    for (dc::index_t j = 0; j < n; ++j)
      s += x[r * n + j] * x[r * n + j];
    T len = dc::sqrt(s);
    norm[r] = len;
    for (dc::index_t j = 0; j < n; ++j)
      y[r * n + j] = x[r * n + j] / len;
  }
};
// Its adjoint for row r: gx = (gy - y (y . gy)) / |x|.
template <class T> struct normalize_row_backward {
  T const *y, *gy, *norm;
  T *gx;
  dc::index_t n;
  DUALCAST_HD void operator()(dc::index_t r) const {
    T dot = 0;
    for (dc::index_t j = 0; j < n; ++j)
      dot += y[r * n + j] * gy[r * n + j];
    for (dc::index_t j = 0; j < n; ++j)
      gx[r * n + j] = (gy[r * n + j] - y[r * n + j] * dot) / norm[r];
  }
};

// The operation on tape variables: the rows of a rank-2 variable, each scaled to length 1.
template <class T> dc::var<T> normalize_rows(dc::var<T> const &x) {
  if (x.rank() != 2)
    throw dc::shape_error("my_ops::normalize_rows: needs a matrix, got shape " +
                          dc::to_string(x.dims()));
  dc::index_t const rows = x.dims()[0], n = x.dims()[1];
  return dc::custom_op(
      "normalize_rows",
      [&](auto const &ex, auto &ctx, dc::tensor<T> const &xv) { // forward
        dc::tensor<T> xc = xv.contiguous();
        auto y = dc::tensor<T>::empty(xv.dims(), xv.dev());
        auto norm = dc::tensor<T>::empty({rows}, xv.dev());
        dc::for_each(ex, rows,
                     normalize_row<T>{xc.data(), y.mutable_data(), norm.mutable_data(), n}, n);
        ctx.save(y, "result"); // version-checked before backward reads them
        ctx.save(norm, "row lengths");
        return y;
      },
      [rows, n](auto const &ex, auto const &ctx, auto &g) { // backward
        if (!g.needs(0))
          return;
        dc::tensor<T> gy = g.out(0).contiguous();
        auto gx = dc::tensor<T>::empty(gy.dims(), gy.dev());
        dc::for_each(ex, rows,
                     normalize_row_backward<T>{ctx.saved(0).data(), gy.data(), ctx.saved(1).data(),
                                               gx.mutable_data(), n},
                     n);
        g.add(0, gx);
      },
      x);
}

} // namespace my_ops

int main() {
  using T = double;
  std::mt19937 gen(7);
  std::uniform_real_distribution<T> u(-1, 1);
  std::vector<T> xs(12), ws(12);
  for (auto &v : xs)
    v = u(gen);
  for (auto &v : ws)
    v = u(gen);
  auto X = dc::tensor<T>::from({3, 4}, xs), W = dc::tensor<T>::from({3, 4}, ws);

  // loss = sum(normalize_rows(x) * w), its gradient by the tape...
  dc::tape tp;
  auto x = tp.variable(X);
  auto loss = dc::sum(my_ops::normalize_rows(x) * W);
  tp.backward(loss);
  auto g = x.grad().to_vector();

  // ... and by central differences
  auto f = [&](std::vector<T> const &v) {
    dc::tape t2;
    return dc::sum(my_ops::normalize_rows(t2.constant(dc::tensor<T>::from({3, 4}, v))) * W).item();
  };
  T worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto p = xs, m = xs;
    p[i] += 1e-6, m[i] -= 1e-6;
    T fd = (f(p) - f(m)) / 2e-6;
    worst = std::max(worst, std::abs(fd - g[i]));
  }
  std::printf("custom_op normalize_rows: loss %.6f, largest |tape - central difference| %.2e\n",
              loss.item(), worst);
  return worst < 1e-8 ? 0 : 1;
}
