// bench/gradbench/modules/ode.hpp: GradBench's `ode` (evals/ode/README.md): s steps of the
// classic Runge-Kutta method (RK4) from y(0) = 0 to t = 2 on y' = f(y), f(y)_0 = x_0,
// f(y)_i = x_i y_{i-1}; the gradient of the last element of y(2) with respect to x from the tape
// (a few whole-array operations per stage; the shift y_{i-1} as a slice and a concatenation).
//   input {x: double[n], s}; primal -> double[n] (y(2)); gradient -> double[n]
#pragma once

#include "common.hpp"

namespace gradbench::ode {

struct input {
  long n = 0, s = 0;
  dc::tensor<double> x;
};
inline input parse(json const &in) {
  input r;
  auto x = numbers(field(in, "x"), "x");
  r.s = integer(field(in, "s"), "s", 1), r.n = long(x.size());
  if (x.empty())
    throw input_error("x must not be empty");
  check_size(double(r.s) * double(r.n), "s steps of n values");
  r.x = dc::tensor<double>::from({r.n}, x);
  return r;
}

inline dc::var<double> solve(input const &in, dc::var<double> const &x) {
  auto &tp = *x.owner();
  long const n = in.n;
  auto one = tp.constant(dc::tensor<double>::full({1}, 1.0));
  auto f = [&](dc::var<double> const &y) -> dc::var<double> { // x * (1, y_0, ..., y_{n-2})
    if (n == 1)
      return x;
    return x * dc::concat(std::vector<dc::var<double>>{one, dc::slice(y, 0, 0, n - 1)}, 0);
  };
  double const h = 2.0 / double(in.s);
  dc::var<double> y = tp.constant(dc::tensor<double>::zeros({n}));
  for (long step = 0; step < in.s; ++step) {
    dc::var<double> k1 = f(y);
    dc::var<double> k2 = f(y + (h / 2) * k1);
    dc::var<double> k3 = f(y + (h / 2) * k2);
    dc::var<double> k4 = f(y + h * k3);
    y = y + (h / 6) * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
  }
  return y;
}

struct primal : job {
  input const &in;
  dc::tensor<double> y;
  explicit primal(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    y = solve(in, tp.constant(in.x)).value();
  }
  json output() const override { return y.to_vector(); }
};

struct gradient : job {
  input const &in;
  dc::tensor<double> g;
  explicit gradient(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    auto x = tp.variable(in.x);
    tp.backward(dc::sum(dc::slice(solve(in, x), 0, in.n - 1, in.n)));
    g = x.grad();
  }
  json output() const override { return g.to_vector(); }
};

inline void add(registry &r) {
  r.add("ode", "primal", make_function<input, primal>(parse));
  r.add("ode", "gradient", make_function<input, gradient>(parse));
}

} // namespace gradbench::ode
