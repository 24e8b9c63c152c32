// bench/gradbench/modules/lstm.hpp: GradBench's `lstm` (evals/lstm/README.md): ADBench's diagonal
// LSTM loss and its gradient with respect to main_params and extra_params -- the model of
// examples/models/dlstm.hpp, each layer-step one fused D-LSTM cell (cells::dlstm_fn) on the tape.
//   input {main_params: (2l, 4b), extra_params: (3, b), state: (2l, b), sequence: (c, b)}
//   objective -> double; jacobian -> double[8lb + 3b] (main_params then extra_params, row-major)
#pragma once

#include "common.hpp"

#include "models/dlstm.hpp"

namespace gradbench::lstm {

struct input {
  dlstm::problem p;
  dc::tensor<double> main, extra;
};
inline input parse(json const &in) {
  std::size_t rows = 0, cols = 0, three = 3, b = 0, c = 0;
  input r;
  r.p.main = matrix(field(in, "main_params"), "main_params", rows, cols);
  if (rows == 0 || rows % 2 || cols == 0 || cols % 4)
    throw input_error("main_params must have 2l rows of 4b numbers");
  b = cols / 4;
  r.p.extra = matrix(field(in, "extra_params"), "extra_params", three, b);
  std::size_t state_rows = rows;
  r.p.state = matrix(field(in, "state"), "state", state_rows, b);
  r.p.seq = matrix(field(in, "sequence"), "sequence", c, b);
  if (c < 2)
    throw input_error("sequence must have at least 2 rows");
  r.p.l = int(rows / 2), r.p.b = int(b), r.p.c = int(c);
  r.main = dc::tensor<double>::from({dc::index_t(rows), dc::index_t(cols)}, r.p.main);
  r.extra = dc::tensor<double>::from({3, dc::index_t(b)}, r.p.extra);
  return r;
}

struct objective : job {
  input const &in;
  double y = 0;
  explicit objective(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    y = dlstm::loss(in.p, tp.constant(in.main), tp.constant(in.extra)).item();
  }
  json output() const override { return y; }
};

struct jacobian : job {
  input const &in;
  dc::tensor<double> gm, ge;
  explicit jacobian(input const &i) : in(i) {}
  void run() override {
    dc::tape tp;
    use_executor(tp);
    auto main = tp.variable(in.main), extra = tp.variable(in.extra);
    tp.backward(dlstm::loss(in.p, main, extra));
    gm = main.grad(), ge = extra.grad();
  }
  json output() const override {
    auto g = gm.to_vector(), e = ge.to_vector();
    g.insert(g.end(), e.begin(), e.end());
    return g;
  }
};

// The plain double-precision objective (examples/models/dlstm.hpp), for the timings only.
struct objective_plain : job {
  input const &in;
  double y = 0;
  explicit objective_plain(input const &i) : in(i) {}
  void run() override { y = dlstm::objective_plain(in.p); }
  json output() const override { return y; }
};

inline void add(registry &r) {
  r.add("lstm", "objective", make_function<input, objective>(parse));
  r.add("lstm", "jacobian", make_function<input, jacobian>(parse));
  r.add("lstm", "objective_plain", make_function<input, objective_plain>(parse));
}

} // namespace gradbench::lstm
