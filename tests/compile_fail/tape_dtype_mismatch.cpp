// must-not-compile: a float variable and a double variable in one elementwise operation on the
// tape (the element type of every operand is fixed at compile time, so this is no run-time error).
// expect: dualcast: elementwise operands must have one element type
#include <dualcast/autodiff.hpp>

int main() {
  dualcast::tape tp;
  auto x = tp.variable(dualcast::tensor<float>::zeros({4}));
  auto y = tp.variable(dualcast::tensor<double>::zeros({4}));
  auto z = x * y;
  (void)z;
}
