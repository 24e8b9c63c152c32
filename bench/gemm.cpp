// Single-precision gemm throughput of one BLAS against the machine's FMA peak (issue 41: a BLAS
// that knows the CPU). Built once per candidate library by bench/gemm/run, which links it with
// that library; every candidate is called through the same row-major CBLAS call (oneDNN's
// dnnl_sgemm where DUALCAST_BENCH_DNNL is defined).
//
//   gemm --blas NAME [--threads N] [--reps N] [--no-header]
//
// Shapes: the LSTM step's gemms (batch 256, input 512, hidden 1024: the gate matmuls forward, the
// weight and input gradients backward), the char-LSTM step's (batch 32, hidden 128, 65 letters
// ... its recurrent and output gemms), and conv2d's im2col gemm of bench/primitives (a 3x3
// convolution of 16 -> 32 channels over 8 images of 64x64). Prints CSV rows:
//   blas,shape,m,n,k,threads,median_ms,gflops,peak_gflops,percent_of_peak
// peak_gflops: an FMA-throughput loop (independent chains of 8-float FMAs, AVX2) on the same
// threads, the ceiling no gemm can pass.
#include <immintrin.h>
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

// GFLOP/s of independent FMA chains on `threads` threads (2 flops per lane per FMA).
double fma_peak(int threads) {
#if defined(__FMA__) && defined(__AVX__)
  constexpr int chains = 12;
  constexpr long iters = 20'000'000;
  std::vector<double> runs;
  for (int rep = 0; rep < 5; ++rep) {
    auto const t0 = std::chrono::steady_clock::now();
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      __m256 acc[chains];
      for (int c = 0; c < chains; ++c)
        acc[c] = _mm256_set1_ps(float(c));
      __m256 const x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
      for (long i = 0; i < iters; ++i) {
        // (unrolled, so that the chains stay in registers: a loop over an array in memory would
        // time store-to-load forwarding, not the FMA units)
#pragma GCC unroll 12
        for (int c = 0; c < chains; ++c)
          acc[c] = _mm256_fmadd_ps(acc[c], x, y);
      }
      float out[8];
      __m256 s = acc[0];
      for (int c = 1; c < chains; ++c)
        s = _mm256_add_ps(s, acc[c]);
      _mm256_storeu_ps(out, s);
      sink += out[0];
    }
    double const sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sink == 12345.f)
      std::printf("#\n"); // (keeps the loop)
    runs.push_back(double(threads) * iters * chains * 8 * 2 / sec / 1e9);
  }
  return *std::max_element(runs.begin(), runs.end());
#else
  (void)threads;
  return 0; // (built without AVX2 / FMA: no peak)
#endif
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
  }
  omp_set_num_threads(threads);
  shape_case const cases[] = {
      {"lstm_step gates x Wx", 256, 4096, 512, false, false},
      {"lstm_step gates h Wh", 256, 4096, 1024, false, false},
      {"lstm_step dWh = h^T dG", 1024, 4096, 256, true, false},
      {"lstm_step dh = dG Wh^T", 256, 1024, 4096, false, true},
      {"char_lstm h Wh", 32, 512, 128, false, false},
      {"char_lstm logits", 1024, 65, 128, false, false},
      {"char_lstm dWy = H^T dL", 128, 65, 1024, true, false},
      {"conv2d im2col", 32768, 32, 144, false, false},
  };
  double const peak = fma_peak(threads);
  if (header)
    std::printf("blas,shape,m,n,k,threads,median_ms,gflops,peak_gflops,percent_of_peak\n");
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
    std::printf("%s,%s,%d,%d,%d,%d,%.4f,%.1f,%.1f,%.1f\n", blas.c_str(), s.name, s.m, s.n, s.k,
                threads, t, gflops, peak, peak > 0 ? 100 * gflops / peak : 0.0);
  }
}
