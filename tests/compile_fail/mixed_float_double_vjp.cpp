// must-not-compile: a float input in a double VJP; the message is the only error (the call's body
// is not compiled after it: it gave some 30 lines of follow-on errors).
// expect: all arrays of one call must have the same element type
// max-errors: 1
#include <dualcast/dualcast.hpp>

int main() {
  float xs[16] = {1, 2, 3, 4};
  double xbar[16] = {}, ybar[16] = {};
  dualcast::view<float> x(xs, {16});
  dualcast::view<double> xb(xbar, {16}), yb(ybar, {16});
  dualcast::vjp(dualcast::cpu{}, dualcast::kernel([](auto a) { return a * a; }), dualcast::out(xb),
                dualcast::in(x), dualcast::in(yb));
}
