// A GRU trained on a small sequence task with the ready fused GRU cell (dualcast::gru_cell: ONE
// fused node per step, mixed-mode gradients) and Adam: read a sequence of numbers and output, at
// every step, the mean of what was read so far. Prints the loss falling; non-zero exit when it
// does not fall tenfold.
//
//   gru_train [steps = 300] [hidden = 32] [batch = 64] [length = 20]
#include <dualcast/autodiff.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace dc = dualcast;

int main(int argc, char **argv) {
  int const steps = argc > 1 ? std::atoi(argv[1]) : 300;
  dc::index_t const H = argc > 2 ? std::atol(argv[2]) : 32;
  dc::index_t const B = argc > 3 ? std::atol(argv[3]) : 64;
  int const T = argc > 4 ? std::atoi(argv[4]) : 20;

  dc::tape tp;
  dc::parameters<float> ps;
  auto wx = ps.add("wx", tp.variable(dc::xavier_uniform<float>({1, 3 * H}, 1)));
  auto bx = ps.add("bx", tp.variable(dc::tensor<float>::zeros({3 * H})));
  auto wh = ps.add("wh", tp.variable(dc::xavier_uniform<float>({H, 3 * H}, 2)));
  auto bh = ps.add("bh", tp.variable(dc::tensor<float>::zeros({3 * H})));
  auto wy = ps.add("wy", tp.variable(dc::xavier_uniform<float>({H, 1}, 3)));
  auto by = ps.add("by", tp.variable(dc::tensor<float>::zeros({1})));
  dc::adam opt(ps, {.lr = 1e-2});
  std::printf("GRU, hidden %ld, batch %ld, sequences of %d numbers, %zu parameters; task: the "
              "running mean\n",
              long(H), long(B), T, std::size_t(ps.numel()));

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  double first = 0, last = 0;
  for (int it = 1; it <= steps; ++it) {
    std::vector<dc::tensor<float>> xs, targets;
    std::vector<float> sum(std::size_t(B), 0.0f);
    for (int t = 0; t < T; ++t) {
      std::vector<float> x(static_cast<std::size_t>(B)), y(static_cast<std::size_t>(B));
      for (std::size_t r = 0; r < x.size(); ++r) {
        x[r] = u(rng);
        sum[r] += x[r];
        y[r] = sum[r] / float(t + 1);
      }
      xs.push_back(dc::tensor<float>::from({B, 1}, x));
      targets.push_back(dc::tensor<float>::from({B, 1}, y));
    }
    dc::var<float> h = tp.constant(dc::tensor<float>::zeros({B, H}));
    std::vector<dc::var<float>> errors;
    for (int t = 0; t < T; ++t) {
      auto gx = dc::matmul(tp.constant(xs[std::size_t(t)]), wx) + bx; // (B, 3H): r, z, n
      auto gh = dc::matmul(h, wh) + bh;
      h = dc::gru_cell(gx, gh, h); // one fused node
      auto y = dc::matmul(h, wy) + by;
      errors.push_back(y - targets[std::size_t(t)]);
    }
    auto e = dc::concat(errors, 0);
    auto loss = dc::mean(e * e);
    tp.backward(loss);
    opt.step();
    tp.zero_grad();
    tp.clear();
    double const l = loss.item();
    if (it == 1)
      first = l;
    last = l;
    if (it % std::max(1, steps / 10) == 0 || it == 1)
      std::printf("step %4d  mean squared error %.5f\n", it, l);
  }
  bool const fell = last < first / 10;
  std::printf("mean squared error %.5f -> %.5f: %s\n", first, last,
              fell ? "fell tenfold" : "DID NOT FALL TENFOLD");
  return fell ? 0 : 1;
}
