// bench/gradbench/modules/lse.hpp: GradBench's `lse` (evals/lse/README.md): logsumexp of a vector
// and its gradient. Written from primitives as the eval asks (max, exp, sum, log: no builtin
// logsumexp with a hand-written derivative); the gradient comes from the tape.
//   input {"x": double[n]}; primal -> double, gradient -> double[n]
#pragma once

#include "common.hpp"

#include <cmath>

namespace gradbench::lse {

struct input {
  dc::tensor<double> x;
};
inline input parse(json const &in) {
  auto x = numbers(field(in, "x"), "x");
  if (x.empty())
    throw input_error("x must not be empty");
  return {dc::tensor<double>::from({dc::index_t(x.size())}, x)};
}

// m + log(sum(exp(x - m))) with m = max(x): the shift keeps exp finite. The result does not
// depend on m (its derivative, 1 - sum(softmax), is zero), so m is taken off the tape (detach):
// the same value and gradient without the max's and the broadcast's backward passes.
template <class V> auto lse_from_primitives(V const &x) {
  auto m = dc::detach(dc::max(x));
  return m + dc::log(dc::sum(dc::exp(x - m)));
}

struct primal : job {
  input const &in;
  double y = 0;
  explicit primal(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    y = lse_from_primitives(tp.constant(in.x)).item();
  }
  json output() const override { return y; }
};

struct gradient : job {
  input const &in;
  dc::tensor<double> g;
  explicit gradient(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    auto x = tp.variable(in.x);
    tp.backward(lse_from_primitives(x));
    g = x.grad();
  }
  json output() const override { return g.to_vector(); }
};

// The plain double-precision primal, for the side-by-side timings only.
struct primal_plain : job {
  input const &in;
  double y = 0;
  explicit primal_plain(input const &i) : in(i) {}
  void run() override {
    double const *x = in.x.data();
    dc::index_t n = in.x.size();
    double m = x[0], s = 0;
    for (dc::index_t i = 1; i < n; ++i)
      m = std::max(m, x[i]);
    for (dc::index_t i = 0; i < n; ++i)
      s += std::exp(x[i] - m);
    y = m + std::log(s);
  }
  json output() const override { return y; }
};

inline void add(registry &r) {
  r.add("lse", "primal", make_function<input, primal>(parse));
  r.add("lse", "gradient", make_function<input, gradient>(parse));
  r.add("lse", "primal_plain", make_function<input, primal_plain>(parse));
}

} // namespace gradbench::lse
