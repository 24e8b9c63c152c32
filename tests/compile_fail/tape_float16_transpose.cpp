// must-not-compile: a shape operation on a half variable (transpose) names itself in its refusal
// (issue 37); a lazy 16-bit expression as operand is refused the same way.
// expect: dualcast::transpose: does not take bfloat16 / half variables
// max-errors: 2
#include <dualcast/autodiff.hpp>

int main() {
  dualcast::tape tp;
  auto x = tp.variable(dualcast::tensor<dualcast::half>::zeros({4, 4}));
  auto y = dualcast::transpose(x * 2.0f);
  (void)y;
}
