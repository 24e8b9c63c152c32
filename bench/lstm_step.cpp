// bench/lstm_step.cpp: one LSTM cell step with its gate matmuls on the tape, forward + backward,
// float32 (B = 256, input 512, hidden 1024; --quick: 64 x 128 x 256).
//
//   gates = x @ Wx + h @ Wh + b                     (two BLAS gemms + one elementwise node)
//   c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);  h2 = sigmoid(o) * tanh(c2)
//   backward from seeds (dh2, dc2) into Wx, Wh, b, h, c
//
// Variants:
//   fused_store      the cell one fused node that stores its partials (policy::store); the gate
//                    sum one fused node with the cost model's policy (recompute: storing the
//                    three all-ones partials of a sum would add 12 MB)
//   fused_recompute  both fused nodes, nothing stored beyond the inputs (vjp re-evaluates)
//   unfused          the same lambdas evaluated operation by operation (one node per operation)
//   fused_lazy       the cell written with plain operators on variables (lazy expressions,
//                    ops/expression.hpp): gates = mx + mh + b and {h2, c2} each materialised as
//                    ONE fused node (policy by the cost model)
// A second benchmark, lstm_cell_tape, runs the same variants with the gates given as a leaf
// variable (no matmuls): the elementwise part alone, which the matmuls hide in lstm_step (at
// 256x512x1024 the gemms are ~10 GFLOP forward + backward: matmuls_only is ~51 of ~55 ms, so
// the variants differ by noise there; lstm_cell_tape shows fused 1.3x faster than unfused).
// BLAS: OpenBLAS is told to use --threads threads too (openblas_set_num_threads, when the BLAS
// is OpenBLAS). The gate slices' gradients are views of the gates' gradient (no scatter).
// tape_bytes: the distinct bytes the tape holds for backward after forward (saved tensors and
// partial arrays), i.e. the peak of what backward needs.
// The variants run interleaved (each repetition runs all of them), and each variant's time is
// also compared with unfused within the same repetition: median_saving_vs_unfused_ms is the
// median of those paired differences, faster_than_unfused counts the repetitions it won and
// sign_test_p is the one-sided sign test's p-value of that count (the chance of winning at
// least that often if the variant were no faster than unfused; below 0.05: faster).
// Output: CSV benchmark,variant,size,threads,median_ms,tape_bytes,median_saving_vs_unfused_ms,
// faster_than_unfused,sign_test_p,blas on stdout (bench/run writes it to
// bench/results/lstm_step.csv); blas: openblas-openmp, openblas-pthreads, openblas-serial or
// other.
// Options: --quick, --threads N, --reps N, --only VARIANT (runs that variant of lstm_step alone,
// repeatedly, printing its median and 10 % / 90 % quantiles: for profilers).
#include "common.hpp"

#include <dualcast/autodiff.hpp>
#include <dualcast/dualcast.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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
    t.mutable_data()[i] = u(g);
  return t;
}

struct problem {
  dc::index_t B, I, H;
  F32 x, h, c, Wx, Wh, b, dh, dc2, gates;
  problem(dc::index_t B_, dc::index_t I_, dc::index_t H_) : B(B_), I(I_), H(H_) {
    x = random_tensor({B, I}, 1, 1.f);
    h = random_tensor({B, H}, 2, 1.f);
    c = random_tensor({B, H}, 3, 1.f);
    Wx = random_tensor({I, 4 * H}, 4, 0.05f);
    Wh = random_tensor({H, 4 * H}, 5, 0.05f);
    b = random_tensor({4 * H}, 6, 0.1f);
    dh = random_tensor({B, H}, 7, 1.f);
    dc2 = random_tensor({B, H}, 8, 1.f);
    gates = random_tensor({B, 4 * H}, 9, 2.f);
  }
};

// One forward + backward step; returns the tape bytes held after forward. gemm: the gate
// matmuls on the tape (lstm_step) or the gates as a leaf variable (lstm_cell_tape: the
// elementwise part alone). Variant 4 (matmuls_only): the two gemms forward + backward, nothing
// else (the floor the elementwise variants add to).
std::size_t step(problem &p, int variant, bool gemm, double *checksum) {
  dc::tape tp;
  auto Wx = tp.variable(p.Wx), Wh = tp.variable(p.Wh), b = tp.variable(p.b);
  auto h = tp.variable(p.h), c = tp.variable(p.c);
  auto x = tp.constant(p.x);
  auto G = tp.variable(p.gates);
  const dc::index_t H = p.H;
  std::array<V32, 2> r;
  auto slices = [&](auto const &gates) {
    std::array<V32, 4> s;
    for (int k = 0; k < 4; ++k)
      s[std::size_t(k)] = dc::slice(gates, 1, k * H, (k + 1) * H);
    return s;
  };
  if (variant == 4) {
    auto mx = dc::matmul(x, Wx), mh = dc::matmul(h, Wh);
    std::size_t bytes = tp.saved_bytes();
    tp.backward(std::vector<V32>{mx, mh}, std::vector<F32>{p.gates, p.gates});
    return bytes;
  }
  std::array<V32, 4> gs;
  if (!gemm) {
    gs = slices(G);
  } else {
    auto mx = dc::matmul(x, Wx), mh = dc::matmul(h, Wh);
    if (variant == 3)
      gs = slices(mx + mh + b); // lazy: materialised once by the first slice
    else if (variant == 2)
      gs = slices(dc::unfused(gate_sum, mx, mh, b));
    else
      gs = slices(dc::fused(gate_sum, mx, mh, b)); // the cost model: recompute
  }
  auto [i, f, g, o] = gs;
  if (variant == 3) { // plain operators
    auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
    r = dc::eval(dc::sigmoid(o) * dc::tanh(c2), c2);
  } else if (variant == 2) {
    r = dc::unfused(cell, i, f, g, o, c);
  } else if (variant == 0) {
    r = dc::fused(dc::policy::store, cell, i, f, g, o, c);
  } else {
    r = dc::fused(dc::policy::recompute, cell, i, f, g, o, c);
  }
  std::size_t bytes = tp.saved_bytes();
  tp.backward(std::vector<V32>{r[0], r[1]}, std::vector<F32>{p.dh, p.dc2});
  if (checksum) {
    double s = 0;
    for (auto const *v : {&Wx, &Wh, &b, &h, &c, &G}) {
      auto gr = v->grad();
      if (gr.defined())
        for (dc::index_t k = 0; k < gr.size(); k += 97)
          s += double(gr.data()[k]);
    }
    *checksum = s;
  }
  return bytes;
}

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 31, 5);
  bool const quick = o.quick;
  int const threads = o.threads, reps = o.reps;
  std::string const only = o.only;
  char const *blas = bench::blas_name();
  problem p = quick ? problem(64, 128, 256) : problem(256, 512, 1024);
  std::string size = std::to_string(p.B) + "x" + std::to_string(p.I) + "x" + std::to_string(p.H);
  char const *names[] = {"fused_store", "fused_recompute", "unfused", "fused_lazy", "matmuls_only"};
  constexpr int unfused = 2;
  if (!only.empty()) {
    auto it =
        std::find_if(std::begin(names), std::end(names), [&](char const *n) { return only == n; });
    if (it == std::end(names)) {
      std::fprintf(stderr, "--only: no variant %s\n", only.c_str());
      return 2;
    }
    int v = int(it - std::begin(names));
    std::vector<double> t;
    for (int r = 0; r <= reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      step(p, v, true, nullptr);
      if (r > 0) // the first run fills the pool
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count());
    }
    std::sort(t.begin(), t.end());
    auto q = [&](double f) { return t[std::size_t(f * double(t.size() - 1))]; };
    std::printf("lstm_step,%s,%s,%d,median %.3f (10%%: %.3f, 90%%: %.3f)\n", only.c_str(),
                size.c_str(), threads, q(0.5), q(0.1), q(0.9));
    return 0;
  }
  std::printf("benchmark,variant,size,threads,median_ms,tape_bytes,median_saving_vs_unfused_ms,"
              "faster_than_unfused,sign_test_p,blas\n");
  for (bool gemm : {true, false}) {
    char const *bench = gemm ? "lstm_step" : "lstm_cell_tape";
    std::string sz = gemm ? size : std::to_string(p.B) + "x" + std::to_string(p.H);
    const int nv = gemm ? 5 : 4;
    double sums[4] = {};
    std::vector<std::size_t> bytes(static_cast<std::size_t>(nv), 0);
    for (int v = 0; v < nv; ++v) // warm-up (fills the pool); the checksums compare the variants
      bytes[std::size_t(v)] = step(p, v, gemm, v < 4 ? &sums[v] : nullptr);
    // Interleaved: every repetition runs all variants (in a rotating order), so that drifts of
    // the machine (the gemms vary by a few percent) hit all of them alike; the saving of a
    // variant is compared with unfused within the same repetition (a paired difference).
    std::vector<std::vector<double>> t(static_cast<std::size_t>(nv));
    std::vector<std::vector<double>> saving(static_cast<std::size_t>(nv));
    for (int r = 0; r < reps; ++r) {
      std::vector<double> now(static_cast<std::size_t>(nv));
      for (int k = 0; k < nv; ++k) {
        int v = (r + k) % nv;
        auto t0 = std::chrono::steady_clock::now();
        step(p, v, gemm, nullptr);
        now[std::size_t(v)] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
      }
      for (int v = 0; v < nv; ++v) {
        t[std::size_t(v)].push_back(now[std::size_t(v)]);
        saving[std::size_t(v)].push_back(now[unfused] - now[std::size_t(v)]);
      }
    }
    using bench::median;
    auto sign_test = [](long wins, int n) { return bench::sign_test_p(wins, n); };
    for (int v = 0; v < nv; ++v) {
      auto const &sv = saving[std::size_t(v)];
      long wins = std::count_if(sv.begin(), sv.end(), [](double d) { return d > 0; });
      if (v == unfused)
        std::printf("%s,%s,%s,%d,%.3f,%zu,0,-,-,%s\n", bench, names[v], sz.c_str(), threads,
                    median(t[std::size_t(v)]), bytes[std::size_t(v)], blas);
      else
        std::printf("%s,%s,%s,%d,%.3f,%zu,%.3f,%ld/%d,%.2g,%s\n", bench, names[v], sz.c_str(),
                    threads, median(t[std::size_t(v)]), bytes[std::size_t(v)], median(sv), wins,
                    reps, sign_test(wins, reps), blas);
    }
    std::fflush(stdout);
    for (int v = 1; v < 4; ++v)
      if (std::abs(sums[v] - sums[0]) > 1e-3 * (1 + std::abs(sums[0]))) {
        std::fprintf(stderr, "%s: variant %s disagrees with fused_store (%g vs %g)\n", bench,
                     names[v], sums[v], sums[0]);
        return 1;
      }
  }
  return 0;
}
