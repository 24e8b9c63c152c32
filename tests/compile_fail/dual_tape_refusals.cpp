// must-not-compile: every operation that a tape over duals does not support yet refuses dual
// elements at compile time, naming itself (docs/higher-order.md lists the operations that take
// them). One translation unit: each refused call's static_assert fires on its own (7 of them,
// and a few follow-on errors).
// expect: dualcast::cast: not supported on a tape over duals
// expect: dualcast::linear_recurrence: not supported on a tape over duals
// expect: dualcast::prod: not supported on a tape over duals
// expect: dualcast::reduce: not supported on a tape over duals
// expect: dualcast::cumprod: not supported on a tape over duals
// expect: dualcast::scan: not supported on a tape over duals
// expect: dualcast::stencil: not supported on a tape over duals
// max-errors: 14
#include <dualcast/autodiff.hpp>

namespace dc = dualcast;
using D = dc::dual<double, 1>;

struct plus_op {
  template <class T> T operator()(T a, T b) const { return a + b; }
};

int main() {
  dc::tape tp;
  auto x = tp.variable(dc::tensor<D>::full({2, 3}, D(1.0)));
  int n = 0;
  n += int(dc::cast<float>(x).size());
  n += int(dc::linear_recurrence(x, x).size());
  n += int(dc::prod(x).size());
  n += int(dc::reduce(x, plus_op{}, D(0.0)).size());
  n += int(dc::cumprod(x).size());
  n += int(dc::scan(x, plus_op{}, D(0.0)).size());
  n += int(dc::stencil(x, dc::offsets({-1, 0}, {1, 0}), plus_op{}).size());
  return n;
}
