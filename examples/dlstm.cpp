// The D-LSTM objective and its gradient on ADBench's data (data/adbench-lstm/), with each
// layer-step one fused node, checked against a plain double-precision objective and against
// central differences on a few parameters.
//   dlstm [DATA_FILE] [CHARACTERS]    (default: data/adbench-lstm/lstm_l2_c1024.txt, all of them)
#include "models/dlstm.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dc = dualcast;

int main(int argc, char **argv) {
  std::string path = argc > 1 ? argv[1] : DUALCAST_DATA_DIR "/adbench-lstm/lstm_l2_c1024.txt";
  dlstm::problem p = dlstm::read_adbench(path);
  if (argc > 2) { // fewer characters (the test suite runs a short sequence)
    p.c = std::min(p.c, std::atoi(argv[2]));
    p.seq.resize(std::size_t(p.c) * std::size_t(p.b));
  }
  int const rows = 2 * p.l, cols = 4 * p.b;
  auto M = dc::tensor<double>::from({rows, cols}, p.main);
  auto E = dc::tensor<double>::from({3, p.b}, p.extra);

  double plain = dlstm::objective_plain(p);
  auto t0 = std::chrono::steady_clock::now();
  dc::tape tp;
  auto main = tp.variable(M), extra = tp.variable(E);
  auto loss = dlstm::loss(p, main, extra);
  tp.backward(loss);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("D-LSTM l=%d c=%d b=%d: objective %.15f (plain C++ %.15f), gradient of %d + %d "
              "parameters in %.2f ms, %zu nodes\n",
              p.l, p.c, p.b, loss.item(), plain, rows * cols, 3 * p.b, ms, tp.node_count());

  // central differences on a few parameters of each block
  auto objective = [&](dc::tensor<double> const &m, dc::tensor<double> const &e) {
    dc::tape t2;
    return dlstm::loss(p, t2.constant(m), t2.constant(e)).item();
  };
  double worst = std::abs(loss.item() - plain) / std::abs(plain);
  auto gm = main.grad().to_vector(), ge = extra.grad().to_vector();
  for (int which = 0; which < 2; ++which)
    for (int idx : {0, 5, 17, 31, 40}) {
      auto const &base = which == 0 ? M : E;
      if (idx >= base.size())
        continue;
      auto plus = base.clone(), minus = base.clone();
      plus.mutable_data()[idx] += 1e-6;
      minus.mutable_data()[idx] -= 1e-6;
      double fd = which == 0 ? (objective(plus, E) - objective(minus, E)) / 2e-6
                             : (objective(M, plus) - objective(M, minus)) / 2e-6;
      double g = which == 0 ? gm[std::size_t(idx)] : ge[std::size_t(idx)];
      worst = std::max(worst, std::abs(g - fd) / std::max(1.0, std::abs(fd)));
    }
  std::printf("largest relative difference (objective vs plain C++, gradient vs central "
              "differences): %.2e\n",
              worst);
  return worst < 1e-7 ? 0 : 1;
}
