// A user's own differentiated kernel: the Rosenbrock function f(x, y) = (a - x)^2 + b (y - x^2)^2
// over a million points, its values and both partial derivatives in ONE fused pass (no derivative
// written by hand: dual numbers), then a few steps of gradient descent on every point at once.
// Checks the partials against central differences at a few points; non-zero exit on a mismatch.
//
//   rosenbrock [points = 1000000] [threads = 2]
#include <dualcast/dualcast.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace dc = dualcast;

// a = 1 and b = 100 are scalars of the kernel (inactive: never dualized).
constexpr auto rosenbrock = dc::kernel([](auto x, auto y, auto a, auto b) {
  auto u = a - x, v = y - x * x;
  return u * u + b * v * v;
});

int main(int argc, char **argv) {
  long const n = argc > 1 ? std::atol(argv[1]) : 1000000;
  int const threads = argc > 2 ? std::atoi(argv[2]) : 2;
  std::size_t const count = static_cast<std::size_t>(n);
  std::vector<double> x(count), y(count), f(count), dfdx(count), dfdy(count);
  for (long i = 0; i < n; ++i) { // points spread over [-2, 2] x [-1, 3]
    x[std::size_t(i)] = -2.0 + 4.0 * double(i % 1000) / 999.0;
    y[std::size_t(i)] = -1.0 + 4.0 * double(i / 1000 % 1000) / 999.0;
  }
  dc::shape const s{n};
  auto in = [&](std::vector<double> &v) { return dc::view<const double>(v.data(), s); };
  auto out = [&](std::vector<double> &v) { return dc::view<double>(v.data(), s); };
  dc::cpu ex{threads};

  // Values and d f / d x, d f / d y of all points in one pass (x and y active, a and b not).
  auto const t0 = std::chrono::steady_clock::now();
  dc::apply(ex, rosenbrock, dc::active<0, 1>, dc::out(out(f)), dc::out(out(dfdx), out(dfdy)), in(x),
            in(y), 1.0, 100.0);
  double const ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%ld points: values and gradients in one pass, %.2f ms (%.2f ns per point)\n", n, ms,
              ms * 1e6 / double(n));

  // Central differences at a few points.
  bool ok = true;
  for (long i : {0L, 12345L % n, n / 3, n - 1}) {
    auto const k = std::size_t(i);
    double const h = 1e-6;
    auto fx = [&](double xv, double yv) { return rosenbrock(xv, yv, 1.0, 100.0); };
    double const gx = (fx(x[k] + h, y[k]) - fx(x[k] - h, y[k])) / (2 * h);
    double const gy = (fx(x[k], y[k] + h) - fx(x[k], y[k] - h)) / (2 * h);
    bool const good = std::abs(gx - dfdx[k]) <= 1e-6 * (1 + std::abs(gx)) &&
                      std::abs(gy - dfdy[k]) <= 1e-6 * (1 + std::abs(gy));
    ok = ok && good;
    std::printf("  point %ld (%.3f, %.3f): f = %.6f, gradient (%.6f, %.6f), central differences "
                "(%.6f, %.6f): %s\n",
                i, x[k], y[k], f[k], dfdx[k], dfdy[k], gx, gy, good ? "ok" : "MISMATCH");
  }

  // Gradient descent on every point at once: each step one fused pass for the gradients.
  double const step = 1e-4;
  double mean_before = 0, mean_after = 0;
  for (double v : f)
    mean_before += v / double(n);
  for (int it = 0; it < 200; ++it) {
    dc::apply(ex, rosenbrock, dc::active<0, 1>, dc::out(out(f)), dc::out(out(dfdx), out(dfdy)),
              in(x), in(y), 1.0, 100.0);
    for (long i = 0; i < n; ++i) {
      x[std::size_t(i)] -= step * dfdx[std::size_t(i)];
      y[std::size_t(i)] -= step * dfdy[std::size_t(i)];
    }
  }
  dc::apply(ex, rosenbrock, dc::out(out(f)), in(x), in(y), 1.0, 100.0);
  for (double v : f)
    mean_after += v / double(n);
  bool const fell = mean_after < 0.5 * mean_before;
  std::printf("200 gradient-descent steps on all points: mean f %.3f -> %.3f: %s\n", mean_before,
              mean_after, fell ? "falling" : "NOT FALLING");
  return ok && fell ? 0 : 1;
}
