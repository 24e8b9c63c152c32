// must-not-compile: a tape operation that does not take bfloat16 / half variables (max; issue 37:
// docs/mixed-precision.md lists those that do). The message says so, says where the operation is
// named, and how to go on (cast to float).
// expect: this tape operation does not take bfloat16 / half variables
#include <dualcast/autodiff.hpp>

int main() {
  dualcast::tape tp;
  auto x = tp.variable(dualcast::tensor<dualcast::bfloat16>::zeros({4}));
  auto m = dualcast::max(x);
  (void)m;
}
