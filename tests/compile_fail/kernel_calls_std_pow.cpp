// must-not-compile: std::pow on a SIMD batch in a kernel's lambda, values only (the fix:
// dualcast::pow).
// expect: dualcast: std::pow does not take dualcast's numbers
// max-errors: 1
#include <dualcast/dualcast.hpp>

#include <cmath>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a) { return std::pow(a, 2.5); }),
                  dualcast::out(y), x);
}
