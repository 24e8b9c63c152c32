// Tests of second derivatives by a tape over duals (forward over reverse, tape/higher_order.hpp):
// Hessian-vector products against central differences of the plain tape's gradient (random
// inputs, double), Hessians against the exact ones of Rosenbrock's function, a quadratic form and
// log-sum-exp, the values and gradients of a tape over duals against the plain tape's bit for
// bit, an MLP-like loss (matmul + tanh + sum), softmax / log_softmax / logsumexp, a kernel of two
// outputs by dc::call (softmax's values and gradients to rounding), and the refusals (unfused mode,
// GPU tensors).
#include "higher_order_support.hpp"

#include <dualcast/autodiff.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

using tape_support::check_close;
using tape_support::random_tensor;
using namespace higher_order_support;

// Rosenbrock's function on n elements: sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 (slices,
// fused elementwise nodes, sum).
auto rosenbrock = [](auto const &x) {
  dc::index_t const n = x.size();
  auto lo = dc::slice(x, 0, 0, n - 1), hi = dc::slice(x, 0, 1, n);
  auto a = hi - lo * lo;
  auto b = 1.0 - lo;
  return dc::sum(100.0 * a * a + b * b);
};
std::vector<double> rosenbrock_hessian(std::vector<double> const &x) {
  std::size_t const n = x.size();
  std::vector<double> h(n * n, 0.0);
  for (std::size_t i = 0; i + 1 < n; ++i) {
    h[i * n + i] += 1200 * x[i] * x[i] - 400 * x[i + 1] + 2;
    h[i * n + i + 1] += -400 * x[i];
    h[(i + 1) * n + i] += -400 * x[i];
    h[(i + 1) * n + i + 1] += 200;
  }
  return h;
}

// A small MLP's loss in its first layer's weights W (3 x 4): sum(tanh(tanh(X W + b) W2)) with
// X (5 x 3), b (4) and W2 (4 x 2) fixed (matmul, broadcast add, tanh, sum, mean).
T64 const mlp_X = random_tensor({5, 3}, 11), mlp_b = random_tensor({4}, 12),
          mlp_W2 = random_tensor({4, 2}, 13);
auto mlp = [](auto const &W) {
  auto h = dc::tanh(dc::matmul(dc::constant_like(W, mlp_X), W) + dc::constant_like(W, mlp_b));
  auto y = dc::tanh(dc::matmul(h, dc::constant_like(W, mlp_W2)));
  return dc::sum(y) + dc::mean(y * y);
};

// A kernel of two outputs, called on the tape with dc::call (the fused node on duals).
constexpr auto pair_kernel =
    dc::kernel([](auto a, auto b) { return dc::outputs(a * dc::sin(b), dc::exp(a * 0.5) * b); });

} // namespace

TEST_CASE("hvp: Rosenbrock's Hessian exactly, H v against central differences") {
  T64 x = random_tensor({7}, 1, -1.5, 1.5), v = random_tensor({7}, 2);
  auto const xs = x.to_vector(), vs = v.to_vector();
  auto const h = rosenbrock_hessian(xs);
  std::vector<double> hv(xs.size(), 0.0);
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (std::size_t j = 0; j < xs.size(); ++j)
      hv[i] += h[i * xs.size() + j] * vs[j];
  check_close(dc::hvp(rosenbrock, x, v).to_vector(), hv, 1e-12);
  check_close(dc::hvp(rosenbrock, x, v).to_vector(), fd_hvp(rosenbrock, x, v), 1e-6);
  // the Hessian, 4 columns per sweep (7 = 4 + 3: a partial last sweep)
  T64 H = dc::hessian(rosenbrock, x);
  CHECK(H.dims() == shape{7, 7});
  check_close(H.to_vector(), h, 1e-12);
  check_close(dc::hessian<3>(rosenbrock, x).to_vector(), h, 1e-12);
}

TEST_CASE("grad_and_hvp: an MLP at the sizes where the BLAS's blocked kernels run") {
  // X (72 x 40) W (40 x 36): a constant times a variable, one gemm on the dual arrays in place
  // (forward, and X^T times the cotangent in backward), whose values must still be the plain
  // tape's dot products bit for bit; h (72 x 36) W2 (36 x 6): a variable times a constant.
  T64 const X = random_tensor({72, 40}, 21), b = random_tensor({36}, 22),
            W2 = random_tensor({36, 6}, 23);
  auto f = [&](auto const &W) {
    auto h = dc::tanh(dc::matmul(dc::constant_like(W, X), W) + dc::constant_like(W, b));
    auto y = dc::tanh(dc::matmul(h, dc::constant_like(W, W2)));
    return dc::sum(y) + dc::mean(y * y);
  };
  check_second_order(f, random_tensor({40, 36}, 24), random_tensor({40, 36}, 25), true);
}

TEST_CASE("hessian: a quadratic form x^T A x has H = A + A^T (matmul on a vector)") {
  T64 A = random_tensor({6, 6}, 3), x = random_tensor({6}, 4);
  auto f = [&](auto const &xv) { return dc::sum(xv * dc::matmul(dc::constant_like(xv, A), xv)); };
  auto const a = A.to_vector();
  std::vector<double> want(36);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j)
      want[std::size_t(i * 6 + j)] = a[std::size_t(i * 6 + j)] + a[std::size_t(j * 6 + i)];
  check_close(dc::hessian(f, x).to_vector(), want, 1e-13);
}

TEST_CASE("hessian: log-sum-exp has H = diag(p) - p p^T, p = softmax(x)") {
  T64 x = random_tensor({2, 3}, 5, -2.0, 2.0);
  auto f = [](auto const &xv) { return dc::log(dc::sum(dc::exp(xv))); };
  auto const xs = x.to_vector();
  double z = 0;
  for (double e : xs)
    z += std::exp(e);
  std::vector<double> want(36);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 6; ++j)
      want[i * 6 + j] = (i == j ? std::exp(xs[i]) / z : 0.0) - std::exp(xs[i] + xs[j]) / (z * z);
  T64 H = dc::hessian<2>(f, x);
  CHECK(H.dims() == shape{2, 3, 2, 3});
  check_close(H.to_vector(), want, 1e-12);
}

TEST_CASE("grad_and_hvp: an MLP loss's H v against central differences of the gradient") {
  T64 W = random_tensor({3, 4}, 6), v = random_tensor({3, 4}, 7);
  auto const r = dc::grad_and_hvp(mlp, W, v);
  check_close(r.hvp.to_vector(), fd_hvp(mlp, W, v), 1e-6);
  // the value and the gradient: the plain tape's, bit for bit
  dc::tape tp;
  auto Wv = tp.variable(W.clone());
  auto y = dc::detail::as_var(mlp(Wv));
  tp.backward(y);
  CHECK(same_bits(r.value, y.item()));
  auto const g = Wv.grad().to_vector(), gd = r.grad.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << gd[i]);
    CHECK(same_bits(g[i], gd[i]));
  }
}

TEST_CASE("tape over duals: values and gradients are the plain tape's bit for bit") {
  // broadcasting, several outputs of one fused node, a scalar, reductions over axes, views
  T64 x = random_tensor({4, 5}, 8), b = random_tensor({5}, 9), v = random_tensor({4, 5}, 10);
  auto f = [&](auto const &xv) {
    auto s = dc::sigmoid(xv * 1.5 + dc::constant_like(xv, b));
    auto t = dc::sum(dc::exp(-xv) * s, {1});
    auto u = dc::transpose(dc::reshape(s, {5, 4}));
    using V = std::decay_t<decltype(xv)>;
    auto c = dc::concat(std::vector<V>{xv, dc::stack(std::vector<V>{t, t}, 1)}, 1); // (4, 7)
    auto parts = dc::split(dc::repeat(c, {2, 1}), 4, 0);                            // (4, 7) each
    auto w =
        dc::broadcast_to(dc::unsqueeze(t, 1), {4, 3}) * dc::detach(xv * xv).value().slice(1, 0, 3);
    return dc::sum(t * t) + dc::mean(dc::tanh(u)) + dc::sum(dc::slice(xv, 1, 1, 4) * 0.25) +
           dc::sum(dc::sin(parts[1])) + dc::variance(dc::squeeze(dc::reshape(w, {1, 12}))) +
           dc::sum(dc::cos(dc::permute(c, {1, 0})));
  };
  auto const r = dc::grad_and_hvp(f, x, v);
  dc::tape tp;
  auto xv = tp.variable(x.clone());
  auto y = dc::detail::as_var(f(xv));
  tp.backward(y);
  CHECK(same_bits(r.value, y.item()));
  auto const g = xv.grad().to_vector(), gd = r.grad.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << gd[i]);
    CHECK(same_bits(g[i], gd[i]));
  }
  check_close(r.hvp.to_vector(), fd_hvp(f, x, v), 1e-6);
}

TEST_CASE("hvp: an LSTM cell (a ready fused node) against central differences") {
  T64 x = random_tensor({3, 4}, 14), v = random_tensor({3, 4}, 15);
  auto f = [](auto const &xv) {
    auto hc = dc::lstm_cell(xv * 0.5, xv - 0.25, dc::sin(xv), xv * xv, dc::cos(xv));
    return dc::sum(hc[0] * hc[1]);
  };
  check_close(dc::hvp(f, x, v).to_vector(), fd_hvp(f, x, v), 1e-6);
}

TEST_CASE("hvp: softmax, log_softmax and logsumexp (one axis, several, keepdims)") {
  T64 x = random_tensor({3, 5}, 16), v = random_tensor({3, 5}, 17);
  T64 const w = random_tensor({3, 5}, 18);
  check_second_order(
      [&](auto const &xv) {
        auto a = dc::softmax(xv * 2.0, 1);
        auto b = dc::log_softmax(xv, 0);
        auto c = dc::logsumexp(xv, {0, 1});
        auto d = dc::logsumexp(xv * xv, 1, true); // (3, 1)
        return dc::sum(a * dc::constant_like(xv, w)) + dc::sum(b * b) * 0.1 + c +
               dc::sum(dc::tanh(d));
      },
      // (to rounding: the rows run in dual arithmetic, compiled apart from the plain rows, so the
      // compiler may contract their multiply-adds into FMAs differently)
      x, v, false);
}

TEST_CASE("hvp: a kernel of two outputs by dc::call, one argument broadcast") {
  T64 x = random_tensor({4, 3}, 19), v = random_tensor({4, 3}, 20);
  T64 const b = random_tensor({3}, 21);
  check_second_order(
      [&](auto const &xv) {
        auto o = dc::call(pair_kernel, xv, dc::detail::as_var(xv * dc::constant_like(xv, b)));
        return dc::sum(o[0] * o[1]);
      },
      x, v, true);
}

TEST_CASE("tape over duals: refusals") {
  using D = dc::dual<double, 1>;
  dc::tape tp;
  tp.fused = false; // no unfused mode: its nodes are always fused
  auto x = tp.variable(dc::tensor<D>::full({3}, D(1.0)));
  CHECK_THROWS_AS(dc::sum(dc::tanh(x)), dc::tape_error);
  CHECK_THROWS_AS(dc::call(pair_kernel, x, x), dc::tape_error);
  // a direction of another shape
  T64 x0 = random_tensor({3}, 1), v0 = random_tensor({4}, 2);
  CHECK_THROWS_AS(dc::hvp(rosenbrock, x0, v0), dc::shape_error);
}

TEST_CASE("constant_like: the data of a loss on a plain tape and on a tape over duals") {
  using D = dc::dual<double, 2>;
  T64 const t = random_tensor({3, 4}, 31);
  T64 const tt = t.permuted({1, 0}); // (a strided view: read in its own order)
  dc::tape plain;
  auto w = plain.variable(random_tensor({4}, 32));
  auto c = dc::constant_like(w, tt);
  CHECK(!c.requires_grad());
  CHECK(c.dims() == tt.dims());
  CHECK(c.value().to_vector() == tt.to_vector());

  dc::tape duals;
  auto wd = duals.variable(dc::tensor<D>::full({4}, D::variable(0.5, 1)));
  auto cd = dc::constant_like(wd, tt);
  CHECK(!cd.requires_grad());
  CHECK(cd.owner() == &duals);
  REQUIRE(cd.dims() == tt.dims());
  auto const e = cd.value().contiguous();
  T64 const want = tt.contiguous();
  for (dc::index_t i = 0; i < e.size(); ++i) {
    CHECK(same_bits(e.data()[i].val, want.data()[i]));
    CHECK(e.data()[i].d[0] == 0.0);
    CHECK(e.data()[i].d[1] == 0.0);
  }
  // a variable of no tape
  CHECK_THROWS_AS(dc::constant_like(dc::var<D>{}, t), dc::tape_error);
}
