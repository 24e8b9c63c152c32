// must-not-compile: std::exp in a kernel's lambda, which runs on SIMD batches and duals (the fix:
// dualcast::exp). One error per number type it meets: the dual of a batch, and the dual of a
// plain number that the backend reruns non-finite lanes on.
// expect: dualcast: std::exp does not take dualcast's numbers
// max-errors: 2
#include <dualcast/dualcast.hpp>

#include <cmath>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {}, ds[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16}), d(ds, {16});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a) { return std::exp(a) * a; }),
                  dualcast::active<0>, dualcast::out(y), dualcast::out(d), x);
}
