// must-not-compile: integer index tensors are never differentiable (a tape variable of integer
// type), have no arithmetic, and a floating-point tensor is not taken as indices.
// expect: dualcast::var: integer tensors (indices) are never differentiable
// expect: dualcast: indices are a tensor<std::int32_t> or tensor<std::int64_t>
// expect: dualcast::tensor::add_: no arithmetic on integer
// max-errors: 12
#include <dualcast/autodiff.hpp>

#include <cstdint>

namespace dc = dualcast;

int main() {
  dc::tape tp;
  auto i = dc::tensor<std::int32_t>::zeros({3});
  auto v = tp.variable(i); // refused: var<std::int32_t>
  auto x = tp.variable(dc::tensor<double>::zeros({3, 2}));
  auto y = dc::index_select(x, 0, dc::tensor<float>::zeros({2})); // refused: float indices
  i.add_(i);                                                      // refused: arithmetic
  return int(v.size() + y.size());
}
