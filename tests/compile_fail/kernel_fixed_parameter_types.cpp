// must-not-compile: a lambda with fixed parameter types (double), which cannot take the SIMD
// batches a kernel runs on (the fix: [](auto a, auto b); see per_element_fixed_types.cpp for
// values one element at a time).
// expect: write a generic lambda, [](auto a, auto b) { ... }, with dualcast:: math functions
// max-errors: 1
#include <dualcast/dualcast.hpp>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {}, zs[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16}), z(zs, {16});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](double a, double b) { return a * b; }),
                  dualcast::out(z), x, y);
}
