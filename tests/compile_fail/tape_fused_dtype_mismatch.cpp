// must-not-compile: a float variable and a double tensor as arguments of one fused node.
// expect: dualcast::fused: all arrays of one call must have the same element type
#include <dualcast/autodiff.hpp>

int main() {
  dualcast::tape tp;
  auto x = tp.variable(dualcast::tensor<float>::zeros({4}));
  auto k = dualcast::kernel([](auto a, auto b) { return a * b; });
  auto z = dualcast::fused(k, x, dualcast::tensor<double>::zeros({4}));
  (void)z;
}
