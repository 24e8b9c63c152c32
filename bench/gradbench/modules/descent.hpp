// bench/gradbench/modules/descent.hpp: the gradient descent that GradBench's `particle` and
// `saddle` evals prescribe (the solver of Pearlmutter and Siskind's benchmark, as GradBench's C++
// tools run it): from x, step x' = x - eta g(x); accept x' when it lowers f (after 10 accepted
// steps in a row eta doubles), else halve eta; stop when |g(x)| <= 1e-5 or |x' - x| <= 1e-5.
// The answers are compared with fixed numbers, so the rule and its constants are the eval's.
//
// Written over the value type T, so that an outer forward-mode derivative runs through the inner
// descent (T = dual): every test is on values (dualcast's comparisons of duals compare values).
#pragma once

#include "../registry.hpp"

#include <dualcast/numbers/dual.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace gradbench::descent {

inline long iteration_limit() { return long(std::min(1e6, 16 * input_limits().max_elements)); }

// |v| of the values alone: the descent only compares it with a tolerance, so on duals (an outer
// derivative through the descent) the derivatives of a norm were computed and thrown away (a
// square root and a division per nesting level: 12 % of saddle's ff).
template <class T> double norm(std::vector<T> const &v) {
  double s = 0;
  for (auto const &x : v) {
    double const e = dualcast::value_of(x);
    s = s + e * e;
  }
  return std::sqrt(s);
}

// The argmin of f from x0; f(x) -> T and g(x) -> std::vector<T> (the gradient).
template <class T, class F, class G>
std::vector<T> argmin(F const &f, G const &g, std::vector<T> x) {
  T fx = f(x);
  std::vector<T> gx = g(x), next(x.size()), step(x.size());
  double eta = 1e-5;
  // (a bound, so that a NaN, which fails every test, ends with an error, not a loop without end;
  // lowered with the tool's size limit, as the fuzzer lowers it)
  long const max_iterations = iteration_limit();
  for (long iteration = 0, accepted = 0;; ++iteration) {
    if (iteration == max_iterations)
      throw input_error("gradient descent did not converge in " + std::to_string(max_iterations) +
                        " iterations");
    if (norm(gx) <= 1e-5)
      return x;
    if (accepted == 10) {
      eta *= 2, accepted = 0;
      continue;
    }
    for (std::size_t j = 0; j < x.size(); ++j)
      next[j] = x[j] - eta * gx[j], step[j] = next[j] - x[j];
    if (norm(step) <= 1e-5)
      return x;
    T const fnext = f(next);
    if (fnext < fx) {
      x = next, fx = fnext, gx = g(x), ++accepted;
    } else {
      eta /= 2, accepted = 0;
    }
  }
}

// The argmax of f: the argmin of -f.
template <class T, class F, class G>
std::vector<T> argmax(F const &f, G const &g, std::vector<T> x) {
  auto nf = [&](std::vector<T> const &v) { return -f(v); };
  auto ng = [&](std::vector<T> const &v) {
    auto r = g(v);
    for (auto &e : r)
      e = -e;
    return r;
  };
  return argmin(nf, ng, std::move(x));
}

} // namespace gradbench::descent
