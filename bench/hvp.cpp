// bench/hvp.cpp: what a Hessian-vector product by a tape over duals (issue 38, forward over
// reverse: dc::grad_and_hvp) costs against the gradient on the plain tape, on an MLP loss in its
// first layer's weights W (n x h): sum(tanh(tanh(X W + b) W2)) + mean(y * y), X (batch x n),
// W2 (h x 8). Variants, interleaved in each repetition: gradient (the plain tape: record,
// backward), hvp (the loss on dual<double, 1> variables: its value, gradient and H v in one
// backward). The row of hvp carries its paired ratio to the gradient (median and quartiles of the
// per-repetition ratios; the target of issue 38 is at most 3). The same for ADBench's D-LSTM
// objective (examples/models/dlstm.hpp, l = 2, c = 1024: each layer-step one fused node) in its
// main weights (2l x 4b), the extra weights constant. Peers: bench/peers/hvp.py.
// Output: CSV rows benchmark,variant,size,threads,median_ms,paired_ratio,paired_ratio_q1,
//   paired_ratio_q3.
//   hvp [--reps N] [--threads N] [--quick] [--data DIR] [--loss mlp|dlstm] [--cpu-clock]
// --cpu-clock times each run by the thread's CPU time instead of the wall clock (one thread): on
// a machine shared with other processes' work, a run that is descheduled then is not counted.
#include "common.hpp"
#include "models/dlstm.hpp"

#include <dualcast/autodiff.hpp>

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

namespace dc = dualcast;

namespace {

dc::tensor<double> wave(dc::shape const &s, double phase) {
  auto t = dc::tensor<double>::empty(s);
  for (dc::index_t i = 0; i < t.size(); ++i)
    t.raw_data()[i] = 0.5 * std::sin(0.37 * double(i) + phase);
  return t;
}

bench::run_timer timer = bench::host_ms; // (--cpu-clock: thread_cpu_ms)

// Prints the gradient's and H v's rows from their interleaved times t[0], t[1].
void print_rows(bench::options const &o, char const *bench, std::string const &size,
                std::vector<std::vector<double>> const &t) {
  std::vector<double> q(t[1].size());
  for (std::size_t r = 0; r < q.size(); ++r)
    q[r] = t[1][r] / t[0][r];
  std::printf("%s,gradient,%s,%d,%.4f,,,\n", bench, size.c_str(), o.threads, bench::median(t[0]));
  std::printf("%s,hvp,%s,%d,%.4f,%.3f,%.3f,%.3f\n", bench, size.c_str(), o.threads,
              bench::median(t[1]), bench::median(q), bench::quantile(q, 0.25),
              bench::quantile(q, 0.75));
  std::fflush(stdout);
}

void run_dlstm(bench::options const &o, std::string const &data) {
  auto const p = dlstm::read_adbench(data + "/adbench-lstm/lstm_l2_c1024.txt");
  auto const M = dc::tensor<double>::from({2 * p.l, 4 * p.b}, p.main);
  auto const E = dc::tensor<double>::from({3, p.b}, p.extra);
  auto const v = wave(M.dims(), 0.5);
  auto loss = [&](auto const &m) { return dlstm::loss(p, m, dc::constant_like(m, E)); };
  double sink = 0;
  std::vector<std::function<void()>> variants = {
      [&] {
        dc::tape tp;
        auto m = tp.variable(M);
        tp.backward(loss(m));
        sink += m.grad().data()[0];
      },
      [&] { sink += dc::grad_and_hvp(loss, M, v).hvp.data()[0]; },
  };
  print_rows(o, "hvp_dlstm", "l" + std::to_string(p.l) + "_c" + std::to_string(p.c),
             bench::interleaved(variants, o.reps, timer));
  if (sink == 12345.678)
    std::printf("#\n");
}

void run_size(bench::options const &o, dc::index_t batch, dc::index_t n, dc::index_t h) {
  auto const X = wave({batch, n}, 0.1), b = wave({h}, 0.2), W2 = wave({h, 8}, 0.3);
  auto const W = wave({n, h}, 0.4), v = wave({n, h}, 0.5);
  auto loss = [&](auto const &w) {
    auto y = dc::tanh(
        dc::matmul(dc::tanh(dc::matmul(dc::constant_like(w, X), w) + dc::constant_like(w, b)),
                   dc::constant_like(w, W2)));
    return dc::sum(y) + dc::mean(y * y);
  };
  double sink = 0;
  std::vector<std::function<void()>> variants = {
      [&] {
        dc::tape tp;
        auto w = tp.variable(W);
        auto y = dc::detail::as_var(loss(w));
        tp.backward(y);
        sink += w.grad().data()[0];
      },
      [&] { sink += dc::grad_and_hvp(loss, W, v).hvp.data()[0]; },
  };
  print_rows(o, "hvp_mlp",
             std::to_string(batch) + "x" + std::to_string(n) + "x" + std::to_string(h),
             bench::interleaved(variants, o.reps, timer));
  if (sink == 12345.678)
    std::printf("#\n");
}

} // namespace

int main(int argc, char **argv) {
  auto const o = bench::parse(argc, argv, 21, 5);
  std::string data = DUALCAST_DATA_DIR, loss;
  for (std::size_t i = 0; i < o.rest.size(); ++i) {
    if (o.rest[i] == "--data" && i + 1 < o.rest.size())
      data = o.rest[i + 1];
    if (o.rest[i] == "--loss" && i + 1 < o.rest.size())
      loss = o.rest[i + 1];
    if (o.rest[i] == "--cpu-clock")
      timer = bench::thread_cpu_ms;
  }
  std::printf("benchmark,variant,size,threads,median_ms,paired_ratio,paired_ratio_q1,"
              "paired_ratio_q3\n");
  if (loss.empty() || loss == "mlp") {
    run_size(o, 64, 32, 32);
    run_size(o, 256, 64, 64);
    if (!o.quick)
      run_size(o, 1024, 128, 128);
  }
  if (loss.empty() || loss == "dlstm")
    run_dlstm(o, data);
  return 0;
}
