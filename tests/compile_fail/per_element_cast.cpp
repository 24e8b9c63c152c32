// Compiles (a positive control of kernel_casts_batch_to_int.cpp): the same lambda evaluated one
// element at a time.
#include <dualcast/dualcast.hpp>

int main() {
  double xs[16] = {1, 2, 3, 4}, ys[16] = {};
  dualcast::view<double> x(xs, {16}), y(ys, {16});
  dualcast::apply(
      dualcast::cpu{},
      dualcast::kernel([](auto a) { return double(int(a)) * 0.5; }, dualcast::per_element),
      dualcast::out(y), x);
}
