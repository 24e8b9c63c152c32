// bench/gradbench/modules/llsq.hpp: GradBench's `llsq` (evals/llsq/README.md): the linear least
// squares objective y(x) = 1/2 sum_i (s_i - sum_j x_j t_i^j)^2 with t_i = -1 + 2i / (n - 1) and
// s_i = sign(t_i), and its gradient from the tape (one matmul and its backward).
//   input {x: double[m], n}; primal -> double; gradient -> double[m]
#pragma once

#include "common.hpp"

namespace gradbench::llsq {

struct input {
  long n = 0, m = 0;
  dc::tensor<double> x;
};
inline input parse(json const &in) {
  input r;
  auto x = numbers(field(in, "x"), "x");
  r.n = integer(field(in, "n"), "n", 2), r.m = long(x.size());
  if (x.empty())
    throw input_error("x must not be empty");
  check_size(double(r.n) * double(r.m), "the n x m powers of t");
  r.x = dc::tensor<double>::from({r.m, 1}, x);
  return r;
}

// The powers t_i^j (n x m) and the signs s_i (n x 1): the problem's data, built once per input
// (the "prepare" timing).
struct design {
  dc::tensor<double> powers, signs;
  explicit design(input const &in) {
    std::vector<double> p(std::size_t(in.n * in.m)), s(std::size_t(in.n));
    for (long i = 0; i < in.n; ++i) {
      double const t = -1 + double(i) * 2 / double(in.n - 1);
      s[std::size_t(i)] = double((0 < t) - (t < 0));
      double power = 1;
      for (long j = 0; j < in.m; ++j, power *= t)
        p[std::size_t(i * in.m + j)] = power;
    }
    powers = dc::tensor<double>::from({in.n, in.m}, p);
    signs = dc::tensor<double>::from({in.n, 1}, s);
  }
};

inline dc::var<double> objective(design const &d, dc::var<double> const &x) {
  auto &tp = *x.owner();
  auto r = tp.constant(d.signs) - dc::matmul(tp.constant(d.powers), x);
  return 0.5 * dc::sum(r * r);
}

struct primal : job {
  input const &in;
  design d;
  double y = 0;
  explicit primal(input const &i) : in(i), d(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    y = objective(d, tp.constant(in.x)).item();
  }
  json output() const override { return y; }
};

struct gradient : job {
  input const &in;
  design d;
  dc::tensor<double> g;
  explicit gradient(input const &i) : in(i), d(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    auto x = tp.variable(in.x);
    tp.backward(objective(d, x));
    g = x.grad();
  }
  json output() const override { return g.to_vector(); }
};

inline void add(registry &r) {
  r.add("llsq", "primal", make_function<input, primal>(parse));
  r.add("llsq", "gradient", make_function<input, gradient>(parse));
}

} // namespace gradbench::llsq
