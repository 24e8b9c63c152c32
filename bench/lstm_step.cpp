// bench/lstm_step.cpp: one LSTM cell step with its gate matmuls on the tape, forward + backward,
// float32 (B = 256, input 512, hidden 1024; --quick: 64 x 128 x 256).
//
//   gates = x @ Wx + h @ Wh + b                     (two BLAS gemms + one elementwise node)
//   c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);  h2 = sigmoid(o) * tanh(c2)
//   backward from seeds (dh2, dc2) into Wx, Wh, b, h, c
//
// Variants:
//   fused_store      both elementwise kernels fused nodes, partials stored
//   fused_recompute  both fused nodes, nothing stored beyond the inputs (vjp re-evaluates)
//   unfused          the same lambdas evaluated operation by operation (one node per operation)
// tape_bytes: the distinct bytes the tape holds for backward after forward (saved tensors and
// partial arrays), i.e. the peak of what backward needs.
// Output: CSV benchmark,variant,size,threads,median_ms,tape_bytes on stdout (bench/run writes it to
// bench/results/lstm_step.csv). Options: --quick, --threads N, --reps N.
#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dc = dualcast;
using F32 = dc::tensor<float>;
using V32 = dc::var<float>;

namespace {

constexpr auto gate_sum = dc::kernel([](auto a, auto b, auto c) { return a + b + c; });
constexpr auto cell = dc::kernel([](auto i, auto f, auto g, auto o, auto c) {
  auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
  return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
});

F32 random_tensor(dc::shape const &s, unsigned seed, float scale) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  F32 t = F32::empty(s);
  for (dc::index_t i = 0; i < t.size(); ++i)
    t.data()[i] = u(g);
  return t;
}

struct problem {
  dc::index_t B, I, H;
  F32 x, h, c, Wx, Wh, b, dh, dc2;
  problem(dc::index_t B_, dc::index_t I_, dc::index_t H_) : B(B_), I(I_), H(H_) {
    x = random_tensor({B, I}, 1, 1.f);
    h = random_tensor({B, H}, 2, 1.f);
    c = random_tensor({B, H}, 3, 1.f);
    Wx = random_tensor({I, 4 * H}, 4, 0.05f);
    Wh = random_tensor({H, 4 * H}, 5, 0.05f);
    b = random_tensor({4 * H}, 6, 0.1f);
    dh = random_tensor({B, H}, 7, 1.f);
    dc2 = random_tensor({B, H}, 8, 1.f);
  }
};

// One forward + backward step; returns the tape bytes held after forward.
std::size_t step(problem &p, int variant, double *checksum) {
  dc::tape tp;
  auto Wx = tp.variable(p.Wx), Wh = tp.variable(p.Wh), b = tp.variable(p.b);
  auto h = tp.variable(p.h), c = tp.variable(p.c);
  auto x = tp.constant(p.x);
  auto mx = dc::matmul(x, Wx), mh = dc::matmul(h, Wh);
  const dc::index_t H = p.H;
  std::array<V32, 2> r;
  if (variant == 2) {
    auto gates = dc::unfused(gate_sum, mx, mh, b);
    auto gate = [&](int k) { return dc::slice(gates, 1, k * H, (k + 1) * H); };
    r = dc::unfused(cell, gate(0), gate(1), gate(2), gate(3), c);
  } else {
    auto pol = variant == 0 ? dc::policy::store : dc::policy::recompute;
    auto gates = dc::fused(pol, gate_sum, mx, mh, b);
    auto gate = [&](int k) { return dc::slice(gates, 1, k * H, (k + 1) * H); };
    r = dc::fused(pol, cell, gate(0), gate(1), gate(2), gate(3), c);
  }
  std::size_t bytes = tp.saved_bytes();
  tp.backward(std::vector<V32>{r[0], r[1]}, std::vector<F32>{p.dh, p.dc2});
  if (checksum) {
    double s = 0;
    for (auto const *v : {&Wx, &Wh, &b, &h, &c}) {
      auto g = v->grad();
      for (dc::index_t i = 0; i < g.size(); i += 97)
        s += double(g.data()[i]);
    }
    *checksum = s;
  }
  return bytes;
}

} // namespace

int main(int argc, char **argv) {
  bool quick = false;
  int threads = 0, reps = 15;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true, reps = 5;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
  }
#if defined(_OPENMP)
  if (threads > 0)
    omp_set_num_threads(threads);
  threads = omp_get_max_threads();
#else
  threads = 1;
#endif
  problem p = quick ? problem(64, 128, 256) : problem(256, 512, 1024);
  std::string size = std::to_string(p.B) + "x" + std::to_string(p.I) + "x" + std::to_string(p.H);
  char const *names[] = {"fused_store", "fused_recompute", "unfused"};
  std::printf("benchmark,variant,size,threads,median_ms,tape_bytes\n");
  double sums[3] = {};
  for (int v = 0; v < 3; ++v) {
    std::size_t bytes = step(p, v, &sums[v]); // warm-up (fills the pool)
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      step(p, v, nullptr);
      t.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("lstm_step,%s,%s,%d,%.3f,%zu\n", names[v], size.c_str(), threads, t[t.size() / 2],
                bytes);
  }
  for (int v = 1; v < 3; ++v)
    if (std::abs(sums[v] - sums[0]) > 1e-3 * (1 + std::abs(sums[0]))) {
      std::fprintf(stderr, "lstm_step: variant %s disagrees with fused_store (%g vs %g)\n",
                   names[v], sums[v], sums[0]);
      return 1;
    }
  return 0;
}
