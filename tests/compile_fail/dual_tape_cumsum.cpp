// must-not-compile: an operation that a tape over duals does not support yet (cumsum) refuses
// dual elements, naming itself (docs/higher-order.md lists the operations that take them).
// expect: dualcast::cumsum: not supported on a tape over duals
// max-errors: 3
#include <dualcast/autodiff.hpp>

int main() {
  using D = dualcast::dual<double, 1>;
  dualcast::tape tp;
  auto x = tp.variable(dualcast::tensor<D>::full({3}, D(1.0)));
  auto y = dualcast::cumsum(x);
  return int(y.size());
}
