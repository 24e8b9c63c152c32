// dualcast/ops/statistics.hpp: variance, stddev and norm over axes of tape variables, written with
// the reductions and lazy elementwise operations (so their gradients are those operations'
// adjoints, and the elementwise parts fuse).
//
//   dualcast::variance(x);                // all axes, correction 1 (PyTorch's var default)
//   dualcast::variance(x, {-1}, true, 0); // the last axis, keepdims, correction 0 (population)
//   dualcast::stddev(x, {0, 2});          // sqrt(variance): PyTorch's std
//   dualcast::norm(x);                    // L2 over all axes; norm(x, 1), norm(x, INFINITY)
//   dualcast::norm(x, 3.0, {1}, true);    // (sum |x|^p)^(1/p) over axis 1
//
// (Not named var / std: dualcast::var is the variable class.) variance divides the sum of squared
// deviations by n - correction (PyTorch's `correction`, NumPy's ddof); n <= correction gives inf or
// NaN, as in PyTorch. The arguments follow sum / mean (axes, keepdims), with correction last.
// Where the variance is 0, stddev's gradient is 0 (PyTorch's is NaN), and at x = 0 norm's is 0
// for every p (subgradients: the zero inner derivatives win over sqrt'(0) = inf, see
// docs/semantics.md); norm(x, inf) = max |x| sends the gradient to the first element of largest
// magnitude (reduce.hpp), with sign(x).
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/elementwise.hpp>
#include <dualcast/ops/reduce.hpp>
#include <dualcast/tape/tape.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace dualcast {

template <var_like X>
auto variance(X const &x, std::vector<int> const &axes = {}, bool keepdims = false,
              double correction = 1) {
  using T = scalar_of_t<typename detail::var_of_t<X>::value_type>; // (real: also over duals)
  auto const &v = detail::as_var(x);
  auto mask = detail::axis_mask("dualcast::variance", axes, v.rank());
  index_t n = 1;
  for (int i = 0; i < v.rank(); ++i)
    if (mask[std::size_t(i)])
      n *= v.dims().ext[i];
  auto d = v - mean(v, axes, true);
  return sum(d * d, axes, keepdims) * (T(1) / (T(n) - T(correction)));
}

template <var_like X>
auto stddev(X const &x, std::vector<int> const &axes = {}, bool keepdims = false,
            double correction = 1) {
  return sqrt(variance(x, axes, keepdims, correction));
}

// The vector p-norm over axes (all when empty): p = 1, 2, inf, -inf (min |x|), or any p > 0.
template <var_like X>
auto norm(X const &x, double p = 2, std::vector<int> const &axes = {}, bool keepdims = false) {
  DUALCAST_REFUSE_FLOAT16("norm", X); // (max, min and pow of its p-norms do not take 16 bits)
  using T = typename detail::var_of_t<X>::value_type;
  using R = scalar_of_t<T>; // (a real exponent also on a tape over duals)
  auto const &v = detail::as_var(x);
  double const inf = std::numeric_limits<double>::infinity();
  if (!(p > 0) && p != -inf)
    throw error("dualcast::norm: p must be positive, inf or -inf, got " + std::to_string(p));
  var<T> r;
  if (p == inf)
    r = max(abs(v), axes, keepdims);
  else if (p == -inf)
    r = min(abs(v), axes, keepdims);
  else if (p == 1)
    r = sum(abs(v), axes, keepdims);
  else if (p == 2)
    r = sqrt(sum(v * v, axes, keepdims));
  else
    r = pow(sum(pow(abs(v), R(p)), axes, keepdims), R(1 / p));
  return r;
}

} // namespace dualcast
