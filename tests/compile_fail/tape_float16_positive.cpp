// A positive control for the 16-bit tape (issue 37): bfloat16 / half tensors, variables, the cast
// node and the operations docs/mixed-precision.md lists compile.
#include <dualcast/autodiff.hpp>

int main() {
  namespace dc = dualcast;
  dc::tape tp;
  auto x = tp.variable(dc::tensor<dc::half>::zeros({4, 4}));
  auto w = tp.variable(dc::tensor<float>::zeros({4, 4}));
  auto y = dc::softmax(dc::matmul(x, dc::cast<dc::half>(w)) * 2.0f + dc::exp(x), 1);
  tp.backward(dc::sum(dc::cast<float>(dc::mean(y, {1}))));
}
