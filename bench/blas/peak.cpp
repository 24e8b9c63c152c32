// The machine's single-precision FMA peak (issue 41 item 4: the ceiling the gemm table is read
// against). Independent chains of fused multiply-adds, 8-float AVX2 and, where the compiler
// targets it, 16-float AVX-512, on 1 thread and on THREADS threads.
//
//   peak [--threads N] [--reps N] [--no-header]      (built by bench/blas/gemm, -march=native)
//
// Prints CSV rows: isa,threads,rep,gflops (2 flops per lane per FMA). The chains outnumber the FMA
// units times their latency (Zen: 2 units x 4-5 cycles; Intel: 2 x 4), so the units, not the
// dependency chains, bound the loop; they are unrolled into registers, so no load or store runs.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr int chains = 12;
constexpr long iters = 10'000'000;

template <class V, class Fma, class Set, class Sum>
double run(int threads, Fma fma, Set set, Sum sum, int lanes) {
  auto const t0 = std::chrono::steady_clock::now();
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    V acc[chains];
    for (int c = 0; c < chains; ++c)
      acc[c] = set(float(c));
    V const x = set(0.999999f), y = set(1e-7f);
    for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < chains; ++c)
        acc[c] = fma(acc[c], x, y);
    }
    sink += sum(acc);
  }
  double const sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink == 12345.f)
    std::printf("#\n"); // (the sums are used: the loop stays)
  return double(threads) * iters * chains * lanes * 2 / sec / 1e9;
}

#if defined(__AVX2__) && defined(__FMA__)
double avx2(int threads) {
  return run<__m256>(
      threads, [](__m256 a, __m256 x, __m256 y) { return _mm256_fmadd_ps(a, x, y); },
      [](float v) { return _mm256_set1_ps(v); },
      [](__m256 const *acc) {
        __m256 s = acc[0];
        for (int c = 1; c < chains; ++c)
          s = _mm256_add_ps(s, acc[c]);
        float out[8];
        _mm256_storeu_ps(out, s);
        return out[0];
      },
      8);
}
#endif

#if defined(__AVX512F__)
double avx512(int threads) {
  return run<__m512>(
      threads, [](__m512 a, __m512 x, __m512 y) { return _mm512_fmadd_ps(a, x, y); },
      [](float v) { return _mm512_set1_ps(v); },
      [](__m512 const *acc) {
        __m512 s = acc[0];
        for (int c = 1; c < chains; ++c)
          s = _mm512_add_ps(s, acc[c]);
        return _mm512_reduce_add_ps(s);
      },
      16);
}
#endif

} // namespace

int main(int argc, char **argv) {
  int threads = 2, reps = 5;
  bool header = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--no-header")
      header = false;
    else {
      std::fprintf(stderr, "usage: peak [--threads N] [--reps N] [--no-header]\n");
      return 2;
    }
  }
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "peak: --threads and --reps take a positive number\n");
    return 2;
  }
  if (header)
    std::printf("isa,threads,rep,gflops\n");
  for (int t = 1;; t = threads) { // 1 thread, then THREADS
    for (int r = 0; r < reps; ++r) {
#if defined(__AVX2__) && defined(__FMA__)
      std::printf("avx2,%d,%d,%.1f\n", t, r, avx2(t));
#endif
#if defined(__AVX512F__)
      std::printf("avx512,%d,%d,%.1f\n", t, r, avx512(t));
#endif
    }
    if (t == threads)
      break;
  }
#if !defined(__AVX2__) || !defined(__FMA__)
  std::fprintf(stderr, "peak: built without AVX2 / FMA (-march=native on an x86-64 CPU)\n");
  return 1;
#endif
}
