// The README's tape example: a one-layer network's loss and gradients on the reverse-mode tape.
// The elementwise part (tanh(x w) * s + b) becomes one lazy expression, fused into one node when
// sum() consumes it. Checks one gradient entry against a central difference; non-zero exit on a
// mismatch.
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

namespace dc = dualcast;

namespace {
std::vector<double> wave(long n, double phase) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i)
    v[std::size_t(i)] = std::sin(0.7 * double(i) + phase);
  return v;
}

double loss_value(dc::tensor<double> const &X, dc::tensor<double> const &W,
                  dc::tensor<double> const &B) {
  dc::tape tp;
  auto x = tp.constant(X), w = tp.constant(W), b = tp.constant(B);
  return dc::sum(dc::tanh(dc::matmul(x, w)) * 0.5 + b).value().to_vector()[0];
}
} // namespace

int main() {
  auto X = dc::tensor<double>::from({8, 4}, wave(32, 0.0));
  auto W = dc::tensor<double>::from({4, 3}, wave(12, 1.0));
  auto B = dc::tensor<double>::from({3}, wave(3, 2.0)); // broadcast over the 8 rows

  dc::tape tp;
  auto x = tp.constant(X);
  auto w = tp.variable(W), b = tp.variable(B);
  auto h = dc::tanh(dc::matmul(x, w)) * 0.5 + b; // one lazy expression
  auto loss = dc::sum(h);                        // ... materialised as one fused node
  tp.backward(loss);
  double dw = w.grad().to_vector()[4]; // d loss / d W(1, 1)

  // Central difference for W(1, 1).
  const double eps = 1e-6;
  auto Wp = W.clone(), Wm = W.clone();
  Wp.mview()(1, 1) += eps;
  Wm.mview()(1, 1) -= eps;
  double fd = (loss_value(X, Wp, B) - loss_value(X, Wm, B)) / (2 * eps);
  bool ok = std::abs(dw - fd) < 1e-6 * (1 + std::abs(fd));
  std::printf("loss = %.6f, d loss / d W(1,1) = %.8f (finite difference %.8f): %s\n",
              loss.value().to_vector()[0], dw, fd, ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
