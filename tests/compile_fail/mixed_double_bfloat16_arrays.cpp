// must-not-compile: a bfloat16 array among double ones (16-bit arrays mix with float only: the
// call computes in float); the message is the only error.
// expect: all arrays of one call must have the same element type (float and double arrays mixed?
// max-errors: 1
#include <dualcast/dualcast.hpp>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {};
  dualcast::bfloat16 zs[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16});
  dualcast::view<dualcast::bfloat16> z(zs, {16});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a, auto b) { return a * b; }),
                  dualcast::out(y), x, z);
}
