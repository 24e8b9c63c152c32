// Single-precision gemm throughput of one BLAS (issue 41 item 4: a BLAS that knows the CPU). Built
// once per candidate library by bench/blas/gemm, which links it with that library and reads the
// results against the machine's FMA peak (bench/blas/peak.cpp, run in the same rounds). Every
// candidate is called through the same row-major CBLAS call (oneDNN's dnnl_sgemm where
// DUALCAST_BENCH_DNNL is defined).
//
//   gemm --blas NAME [--threads N] [--reps N] [--no-header]
//
// Shapes (C = op(A) op(B), m x n, reduction k), as the benchmarks' tapes call the BLAS:
// - the LSTM step (bench/lstm_step.cpp: batch 256, input 512, hidden 1024): the gate matmuls
//   forward, the weight and input gradients backward;
// - the char-LSTM training step (bench/char_lstm_step.cpp: batch 64, hidden 512, 32 characters,
//   30 letters): the recurrent matmul of one character and its gradients, the output matmul over
//   the window's 2048 rows and its weight gradient;
// - conv2d's im2col + gemm (bench/primitives.cpp, ops/conv2d_gemm.hpp: 32 -> 32 channels, 3 x 3,
//   64 x 64 images): per image y = W cols, wbar += ybar cols^T, cols' adjoint W^T ybar.
// Prints CSV rows: blas,shape,m,n,k,threads,median_ms,gflops
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#ifdef DUALCAST_BENCH_DNNL
#include <dnnl.h>
#else
extern "C" {
// The row-major CBLAS call every candidate exports (101: row major; 111 / 112: (no) transpose).
void cblas_sgemm(int layout, int transa, int transb, int m, int n, int k, float alpha,
                 float const *a, int lda, float const *b, int ldb, float beta, float *c, int ldc);
}
#endif

namespace {

struct shape_case {
  char const *name;
  int m, n, k;
  bool ta, tb; // A (B) stored transposed
};

// C[m x n] = op(A) op(B), all row-major.
void sgemm(shape_case const &s, float const *a, float const *b, float *c) {
#ifdef DUALCAST_BENCH_DNNL
  dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a, s.ta ? s.m : s.k, b,
             s.tb ? s.k : s.n, 0.0f, c, s.n);
#else
  cblas_sgemm(101, s.ta ? 112 : 111, s.tb ? 112 : 111, s.m, s.n, s.k, 1.0f, a, s.ta ? s.m : s.k, b,
              s.tb ? s.k : s.n, 0.0f, c, s.n);
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  std::string blas = "unknown";
  int threads = 2, reps = 9;
  bool header = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--blas" && i + 1 < argc)
      blas = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--no-header")
      header = false;
    else {
      std::fprintf(stderr, "usage: gemm --blas NAME [--threads N] [--reps N] [--no-header]\n");
      return 2;
    }
  }
  omp_set_num_threads(threads);
  shape_case const cases[] = {
      {"lstm_step gates x Wx", 256, 4096, 512, false, false},
      {"lstm_step gates h Wh", 256, 4096, 1024, false, false},
      {"lstm_step dWh = h^T dG", 1024, 4096, 256, true, false},
      {"lstm_step dh = dG Wh^T", 256, 1024, 4096, false, true},
      {"char_lstm gates h Wh", 64, 2048, 512, false, false},
      {"char_lstm dWh = h^T dG", 512, 2048, 64, true, false},
      {"char_lstm dh = dG Wh^T", 64, 512, 2048, false, true},
      {"char_lstm logits H Wy", 2048, 30, 512, false, false},
      {"char_lstm dWy = H^T dL", 512, 30, 2048, true, false},
      {"conv2d y = W cols", 32, 4096, 288, false, false},
      {"conv2d wbar = ybar cols^T", 32, 288, 4096, false, true},
      {"conv2d colsbar = W^T ybar", 288, 4096, 32, true, false},
  };
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "gemm: --threads and --reps take a positive number\n");
    return 2;
  }
  if (header)
    std::printf("blas,shape,m,n,k,threads,median_ms,gflops\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto const &s : cases) {
    std::vector<float> a(std::size_t(s.m) * s.k), b(std::size_t(s.k) * s.n),
        c(std::size_t(s.m) * s.n);
    for (auto &x : a)
      x = u(rng);
    for (auto &x : b)
      x = u(rng);
    sgemm(s, a.data(), b.data(), c.data()); // (warm-up: threads, buffers)
    std::vector<double> ms;
    double const flop = 2.0 * s.m * s.n * double(s.k);
    int const inner = std::max(1, int(2e8 / flop)); // small shapes: several calls per sample
    for (int r = 0; r < reps; ++r) {
      auto const t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < inner; ++i)
        sgemm(s, a.data(), b.data(), c.data());
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
          inner);
    }
    double const t = median(ms), gflops = flop / (t * 1e6);
    std::printf("%s,%s,%d,%d,%d,%d,%.4f,%.1f\n", blas.c_str(), s.name, s.m, s.n, s.k, threads, t,
                gflops);
  }
}
