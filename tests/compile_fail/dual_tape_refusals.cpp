// must-not-compile: every operation that a tape over duals does not support yet refuses dual
// elements at compile time, naming itself (docs/higher-order.md lists the operations that take
// them). One translation unit: each refused call's static_assert fires on its own.
// expect: dualcast::argmax: not supported on a tape over duals
// expect: dualcast::argmin: not supported on a tape over duals
// expect: dualcast::cast: not supported on a tape over duals
// expect: dualcast::conv2d: not supported on a tape over duals
// expect: dualcast::linear_recurrence: not supported on a tape over duals
// expect: dualcast::prod: not supported on a tape over duals
// expect: dualcast::reduce: not supported on a tape over duals
// expect: dualcast::cumprod: not supported on a tape over duals
// expect: dualcast::cummax: not supported on a tape over duals
// expect: dualcast::cummin: not supported on a tape over duals
// expect: dualcast::scan: not supported on a tape over duals
// expect: dualcast::norm: not supported on a tape over duals
// expect: dualcast::stencil: not supported on a tape over duals
// expect: dualcast::max: not supported on a tape over duals
// expect: dualcast::min: not supported on a tape over duals
// max-errors: 40
#include <dualcast/autodiff.hpp>

namespace dc = dualcast;
using D = dc::dual<double, 1>;

struct plus_op {
  template <class T> T operator()(T a, T b) const { return a + b; }
};

int main() {
  dc::tape tp;
  auto x = tp.variable(dc::tensor<D>::full({2, 3}, D(1.0)));
  auto img = tp.variable(dc::tensor<D>::full({1, 1, 4, 4}, D(1.0)));
  auto w = tp.variable(dc::tensor<D>::full({1, 1, 3, 3}, D(1.0)));
  int n = 0;
  n += int(dc::argmax(x).values.size());
  n += int(dc::argmin(x, 0).values.size());
  n += int(dc::cast<float>(x).size());
  n += int(dc::conv2d(img, w).size());
  n += int(dc::linear_recurrence(x, x).size());
  n += int(dc::prod(x).size());
  n += int(dc::reduce(x, plus_op{}, D(0.0)).size());
  n += int(dc::cumprod(x).size());
  n += int(dc::cummax(x).size());
  n += int(dc::cummin(x).size());
  n += int(dc::scan(x, plus_op{}, D(0.0)).size());
  n += int(dc::norm(x).size());
  n += int(dc::stencil(x, dc::offsets({-1, 0}, {1, 0}), plus_op{}).size());
  n += int(dc::max(x).size());
  n += int(dc::min(x).size());
  return n;
}
