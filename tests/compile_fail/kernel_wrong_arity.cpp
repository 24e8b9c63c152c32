// must-not-compile: a two-argument kernel called with one array argument.
// expect: the kernel's lambda cannot be called with this number of arguments
#include <dualcast/dualcast.hpp>

int main() {
  double xs[4] = {1, 2, 3, 4}, ys[4] = {};
  dualcast::view<double> x(xs, {4}), y(ys, {4});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a, auto b) { return a + b; }),
                  dualcast::out(y), x);
}
