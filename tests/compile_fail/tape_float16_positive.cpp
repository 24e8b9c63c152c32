// A positive control for the 16-bit tape (issue 37): bfloat16 / half tensors, variables, the cast
// node and the operations docs/mixed-precision.md lists compile.
#include <dualcast/autodiff.hpp>

int main() {
  namespace dc = dualcast;
  dc::tape tp;
  auto x = tp.variable(dc::tensor<dc::half>::zeros({4, 4}));
  auto w = tp.variable(dc::tensor<float>::zeros({4, 4}));
  auto y = dc::softmax(dc::matmul(x, dc::cast<dc::half>(w)) * 2.0f + dc::exp(x), 1);
  // slice is a view (no custom_op), so the packed cells' gate blocks take 16 bits.
  auto g = tp.variable(dc::tensor<dc::bfloat16>::zeros({4, 16}));
  auto c = tp.variable(dc::tensor<float>::zeros({4, 4}));
  auto [h, c1] = dc::lstm_cell(g, dc::cast<dc::bfloat16>(c));
  auto z = dc::sum(dc::cast<float>(dc::slice(h, 1, 0, 2))) + dc::sum(dc::cast<float>(c1));
  tp.backward(dc::sum(dc::cast<float>(dc::mean(y, {1}))) + z);
}
