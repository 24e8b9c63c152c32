// must compile: the well-formed versions of the cases in this folder, proving the harness (same
// compiler, flags and include paths) can succeed.
#include <dualcast/dualcast.hpp>

int main() {
  double xs[4] = {1, 2, 3, 4}, ys[4] = {};
  dualcast::view<double> x(xs, {4}), y(ys, {4});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a, auto b) { return a + b; }),
                  dualcast::out(y), x, 2.0);
  auto z = dualcast::dual<double, 2>{} + dualcast::dual<double, 2>{};
  (void)z;
}
