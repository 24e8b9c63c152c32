// must-not-compile: a tensor of bfloat16 (issue 37: 16-bit tensors and tape operations on them
// are not supported yet); the message says so and points to the fused calls that take 16-bit views.
// expect: bfloat16 / half tensors and tape operations on them are not supported yet
#include <dualcast/autodiff.hpp>

int main() {
  auto t = dualcast::tensor<dualcast::bfloat16>::zeros({4});
  (void)t;
}
