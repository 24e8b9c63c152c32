// Dual numbers: a function written once, as a generic lambda, evaluated on plain numbers, with its
// gradient (dual<double, 2>) and a second derivative (a dual of duals), checked against finite
// differences. Exits non-zero if a derivative disagrees.
#include <dualcast/math/functions.hpp>

#include <cmath>
#include <cstdio>

namespace dc = dualcast;

int main() {
  // f(x, y) = sigmoid(x y) + log(1 + x^2) sin(y), for any number type.
  auto f = [](auto x, auto y) { return dc::sigmoid(x * y) + dc::log1p(x * x) * dc::sin(y); };
  double const x = 0.7, y = -1.3;

  // Plain numbers: the value.
  double value = f(x, y);

  // The gradient in one evaluation: x and y are independent variables 0 and 1.
  using D2 = dc::dual<double, 2>;
  D2 grad = f(D2::variable(x, 0), D2::variable(y, 1));

  // d2f/dx2: a dual of duals, with x seeded at both levels and y a constant.
  using D1 = dc::dual<double, 1>;
  using DD = dc::dual<D1, 1>;
  DD second = f(DD::variable(D1::variable(x, 0), 0), DD(D1(y)));

  // Central finite differences for comparison.
  double const h = 1e-5, h2 = 1e-4;
  double fd_x = (f(x + h, y) - f(x - h, y)) / (2 * h);
  double fd_y = (f(x, y + h) - f(x, y - h)) / (2 * h);
  double fd_xx = (f(x + h2, y) - 2 * value + f(x - h2, y)) / (h2 * h2);

  std::printf("f(%.1f, %.1f) = %.12f (dual: %.12f)\n\n", x, y, value, grad.val);
  std::printf("             dual number       finite difference\n");
  std::printf("df/dx    %18.12f  %18.12f\n", grad.d[0], fd_x);
  std::printf("df/dy    %18.12f  %18.12f\n", grad.d[1], fd_y);
  std::printf("d2f/dx2  %18.12f  %18.12f\n", second.d[0].d[0], fd_xx);

  auto close = [](double a, double b, double tol) {
    return std::abs(a - b) <= tol * (1 + std::abs(b));
  };
  bool ok = close(grad.val, value, 1e-15) && close(grad.d[0], fd_x, 1e-8) &&
            close(grad.d[1], fd_y, 1e-8) && close(second.d[0].val, grad.d[0], 1e-14) &&
            close(second.d[0].d[0], fd_xx, 1e-5);
  std::printf("\n%s\n", ok ? "derivatives agree with finite differences" : "MISMATCH");
  return ok ? 0 : 1;
}
