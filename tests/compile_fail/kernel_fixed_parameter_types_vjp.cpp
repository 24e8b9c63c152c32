// must-not-compile: a lambda with fixed parameter types, declared per_element, differentiated:
// per_element runs it on plain numbers, but a derivative needs duals.
// expect: the kernel's lambda takes fixed parameter types (such as double)
// max-errors: 1
#include <dualcast/dualcast.hpp>

int main() {
  double xs[16] = {1, 2, 3, 4}, xbar[16] = {}, ybar[16] = {};
  dualcast::view<double> x(xs, {16}), xb(xbar, {16}), yb(ybar, {16});
  auto k = dualcast::kernel([](double a) { return a * a; }, dualcast::per_element);
  dualcast::vjp(dualcast::cpu{}, k, dualcast::out(xb), dualcast::in(x), dualcast::in(yb));
}
