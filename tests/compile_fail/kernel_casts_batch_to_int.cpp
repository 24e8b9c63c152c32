// must-not-compile: a kernel's lambda casting its argument to int, run over SIMD batches (the
// fix: dualcast::kernel(f, dualcast::per_element); see per_element_cast.cpp).
// expect: run such a lambda one element at a time with dualcast::kernel(f, dualcast::per_element)
#include <dualcast/dualcast.hpp>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16});
  dualcast::apply(dualcast::cpu{}, dualcast::kernel([](auto a) { return double(int(a)) * 0.5; }),
                  dualcast::out(y), x);
}
