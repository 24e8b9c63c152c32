// must compile: a lambda with fixed parameter types runs one element at a time, for values, when
// declared per_element (the fix named by kernel_fixed_parameter_types.cpp).
#include <dualcast/dualcast.hpp>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {}, zs[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16}), z(zs, {16});
  dualcast::apply(dualcast::cpu{},
                  dualcast::kernel([](double a, double b) { return a * b; }, dualcast::per_element),
                  dualcast::out(z), x, y);
}
