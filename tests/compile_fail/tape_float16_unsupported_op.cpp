// must-not-compile: a tape operation that does not take bfloat16 / half variables (max; issue 37:
// docs/mixed-precision.md lists those that do). The message names the operation and says how to
// go on (cast to float).
// expect: dualcast::max: does not take bfloat16 / half variables
// max-errors: 4
#include <dualcast/autodiff.hpp>

int main() {
  dualcast::tape tp;
  auto x = tp.variable(dualcast::tensor<dualcast::bfloat16>::zeros({4}));
  auto m = dualcast::max(x);
  (void)m;
}
