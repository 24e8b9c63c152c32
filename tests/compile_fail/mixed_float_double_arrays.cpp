// must-not-compile: a float array among double ones; the message is the only error (the call's
// body is not compiled after it: it gave some 50 lines of follow-on errors).
// expect: all arrays of one call must have the same element type (float and double arrays mixed?
// max-errors: 1
#include <dualcast/dualcast.hpp>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {};
  float zs[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16});
  dualcast::view<float> z(zs, {16});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a, auto b) { return a * b; }),
                  dualcast::out(y), x, z);
}
