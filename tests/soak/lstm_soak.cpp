// tests/soak/lstm_soak.cpp: a long training run of a small LSTM on one reused tape (zero_grad,
// clear), checking that resident memory stays bounded and that losses and gradients stay finite.
// Not part of ctest (it runs for minutes): scripts/soak builds and runs it.
//   lstm_soak [--steps N]   (default 100000)
// Exit status 0 when the resident set after warm-up grew by less than 16 MiB and every value was
// finite; prints the resident set every 10 % of the run.
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;
using T = double;

namespace {

long resident_kib() {
  std::ifstream f("/proc/self/status");
  std::string key;
  long v = -1;
  while (f >> key) {
    if (key == "VmRSS:") {
      f >> v;
      break;
    }
    std::getline(f, key);
  }
  return v;
}

dc::tensor<T> random_tensor(dc::shape s, std::mt19937 &gen, T scale) {
  std::normal_distribution<T> n(0, scale);
  std::vector<T> v(std::size_t(s.size()));
  for (auto &x : v)
    x = n(gen);
  return dc::tensor<T>::from(s, v);
}

bool finite(dc::tensor<T> const &t) {
  for (T x : t.to_vector())
    if (!std::isfinite(x))
      return false;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  long steps = 100000;
  for (int a = 1; a < argc; ++a)
    if (std::string(argv[a]) == "--steps" && a + 1 < argc)
      steps = std::atol(argv[++a]);
  constexpr dc::index_t batch = 4, in = 6, hid = 12, seq = 5;
  std::mt19937 gen(3);
  dc::tape tp;
  // Gates i, f, g, o: input and recurrent weights and a bias each; a linear read-out.
  std::vector<dc::var<T>> wx, wh, bias;
  for (int k = 0; k < 4; ++k) {
    wx.push_back(tp.variable(random_tensor({in, hid}, gen, 0.3)));
    wh.push_back(tp.variable(random_tensor({hid, hid}, gen, 0.3)));
    bias.push_back(tp.variable(random_tensor({hid}, gen, 0.1)));
  }
  auto wy = tp.variable(random_tensor({hid, 1}, gen, 0.3));
  std::vector<dc::var<T> *> params{&wy};
  for (int k = 0; k < 4; ++k)
    params.insert(params.end(), {&wx[std::size_t(k)], &wh[std::size_t(k)], &bias[std::size_t(k)]});

  long warm_kib = -1, peak_kib = 0;
  T first_loss = 0, loss_value = 0;
  for (long step = 0; step < steps; ++step) {
    tp.zero_grad();
    tp.clear();
    // A fresh sequence each step; the target of each row: 0.1 * the sum of its first feature.
    std::vector<dc::tensor<T>> xs;
    for (dc::index_t t = 0; t < seq; ++t)
      xs.push_back(random_tensor({batch, in}, gen, 1.0));
    auto h = tp.constant(dc::tensor<T>::zeros({batch, hid}));
    auto c = tp.constant(dc::tensor<T>::zeros({batch, hid}));
    std::vector<T> target(std::size_t(batch), T(0));
    for (dc::index_t t = 0; t < seq; ++t) {
      auto x = tp.constant(xs[std::size_t(t)]);
      auto xv = xs[std::size_t(t)].to_vector();
      for (dc::index_t b = 0; b < batch; ++b)
        target[std::size_t(b)] += 0.1 * xv[std::size_t(b * in)];
      auto gate = [&](int k) {
        return dc::matmul(x, wx[std::size_t(k)]) + dc::matmul(h, wh[std::size_t(k)]) +
               bias[std::size_t(k)];
      };
      dc::var<T> c2 = dc::sigmoid(gate(1)) * c + dc::sigmoid(gate(0)) * dc::tanh(gate(2));
      dc::var<T> h2 = dc::sigmoid(gate(3)) * dc::tanh(c2);
      c = c2, h = h2;
    }
    auto y = dc::matmul(h, wy);
    dc::var<T> err = y - dc::tensor<T>::from({batch, 1}, target);
    auto loss = dc::mean(err * err);
    tp.backward(loss);
    loss_value = loss.item();
    if (step == 0)
      first_loss = loss_value;
    if (!std::isfinite(loss_value)) {
      std::printf("step %ld: loss is not finite\n", step);
      return 1;
    }
    for (auto *p : params) { // SGD
      auto g = p->grad().clone();
      if (step % 1000 == 0 && !finite(g)) {
        std::printf("step %ld: a gradient is not finite\n", step);
        return 1;
      }
      g.scale_(-0.01);
      p->value().add_(g);
    }
    if (step == std::min(steps - 1, 1000L))
      warm_kib = resident_kib();
    long rss = resident_kib();
    peak_kib = std::max(peak_kib, rss);
    if (steps >= 10 && step % (steps / 10) == 0)
      std::printf("step %7ld  loss %.6f  resident %ld KiB  nodes %zu\n", step, loss_value, rss,
                  tp.node_count());
  }
  long end_kib = resident_kib();
  long growth = end_kib - warm_kib;
  std::printf("steps %ld: loss %.6f -> %.6f; resident after warm-up %ld KiB, at the end %ld KiB "
              "(growth %ld KiB), peak %ld KiB\n",
              steps, first_loss, loss_value, warm_kib, end_kib, growth, peak_kib);
  bool ok = growth < 16 * 1024;
  std::printf("%s\n", ok ? "ok: resident memory bounded, values finite" : "FAIL: memory grew");
  return ok ? 0 : 1;
}
