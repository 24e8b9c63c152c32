// must-not-compile: concat of bfloat16 variables (a run-time list of inputs) names itself in its
// refusal (issue 37).
// expect: dualcast::concat: does not take bfloat16 / half variables
// max-errors: 2
#include <dualcast/autodiff.hpp>

#include <vector>

int main() {
  namespace dc = dualcast;
  dc::tape tp;
  std::vector<dc::var<dc::bfloat16>> xs{tp.variable(dc::tensor<dc::bfloat16>::zeros({2})),
                                        tp.variable(dc::tensor<dc::bfloat16>::zeros({3}))};
  auto y = dc::concat(xs, 0);
  (void)y;
}
