// must-not-compile: the data of a loss over dual<double, 1> variables given as a float tensor
// (constant_like converts the values of x's own plain number type only, never between types).
// expect: dualcast::constant_like: t must hold the plain numbers of x's elements
#include <dualcast/autodiff.hpp>

int main() {
  using D = dualcast::dual<double, 1>;
  dualcast::tape tp;
  auto x = tp.variable(dualcast::tensor<D>::zeros({4}));
  auto c = dualcast::constant_like(x, dualcast::tensor<float>::zeros({4}));
  (void)c;
}
