// must-not-compile: a kernel whose output is not a number (a string literal).
// expect: every output of a kernel must be a number or a dual number
#include <dualcast/dualcast.hpp>

int main() {
  double xs[4] = {1, 2, 3, 4}, ys[4] = {};
  dualcast::view<double> x(xs, {4}), y(ys, {4});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto) { return "not a number"; }),
                  dualcast::out(y), x);
}
