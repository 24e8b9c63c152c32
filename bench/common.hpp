// bench/common.hpp: what every benchmark here shares -- the command line (--quick, --threads N,
// --reps N, --only NAME, --memory NAME), the thread count given to OpenMP and OpenBLAS, medians,
// interleaved repetitions (timed on the host or by a given timer) with paired comparisons, the
// one-sided sign test, and the memory a run adds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

// OpenBLAS's thread count and threading model (absent from other BLAS libraries: weak
// references, null then).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_parallel() __attribute__((weak));
// (the same in the scipy-openblas wheels' OpenBLAS, CMake's DUALCAST_SCIPY_OPENBLAS_DIR)
extern "C" void scipy_openblas_set_num_threads(int) __attribute__((weak));
extern "C" int scipy_openblas_get_parallel() __attribute__((weak));

namespace bench {

// The benchmarks' own arrays, 64-byte aligned as dualcast's tensors are (tensor/memory.hpp).
// std::vector's large blocks start 16 bytes into a cache line, so that every 64-byte AVX-512 load
// of a float array straddles two lines: on an AMD Zen 4 that made the float32 LSTM cell's
// value_and_vjp 14 % slower than on aligned arrays, and 16-bit storage (half as wide per load)
// look faster than float32 when it is not (bench/results/runs/2026-12-06-lstm16-aligned).
template <class T> struct aligned_allocator {
  using value_type = T;
  static constexpr std::align_val_t alignment{64};
  aligned_allocator() = default;
  template <class U> aligned_allocator(aligned_allocator<U> const &) {}
  T *allocate(std::size_t n) { return static_cast<T *>(::operator new(n * sizeof(T), alignment)); }
  void deallocate(T *p, std::size_t) { ::operator delete(p, alignment); }
  template <class U> bool operator==(aligned_allocator<U> const &) const { return true; }
};
template <class T> using aligned_vector = std::vector<T, aligned_allocator<T>>;

struct options {
  bool quick = false;
  int threads = 0; // after parse(): the threads OpenMP and OpenBLAS use
  int reps = 0;
  std::string only;   // --only NAME: one variant alone (for profilers)
  std::string memory; // --memory NAME: one run of one variant, then its peak memory
  std::vector<std::string> rest;
};

// Parses the shared options (others are left in `rest`) and sets the thread count of OpenMP and
// OpenBLAS (--threads N; default: OpenMP's).
inline options parse(int argc, char **argv, int default_reps, int quick_reps) {
  options o;
  o.reps = -1;
  for (int i = 1; i < argc; ++i) {
    auto is = [&](char const *name) { return std::strcmp(argv[i], name) == 0; };
    auto next = [&]() -> char const * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (is("--quick"))
      o.quick = true;
    else if (is("--threads"))
      o.threads = std::atoi(next());
    else if (is("--reps"))
      o.reps = std::atoi(next());
    else if (is("--only"))
      o.only = next();
    else if (is("--memory"))
      o.memory = next();
    else
      o.rest.emplace_back(argv[i]);
  }
  if (o.reps < 0)
    o.reps = o.quick ? quick_reps : default_reps;
#if defined(_OPENMP)
  if (o.threads > 0)
    omp_set_num_threads(o.threads);
  o.threads = omp_get_max_threads();
#else
  o.threads = 1;
#endif
  if (openblas_set_num_threads)
    openblas_set_num_threads(o.threads);
  if (scipy_openblas_set_num_threads)
    scipy_openblas_set_num_threads(o.threads);
  return o;
}

// Which BLAS runs the gemms: openblas-openmp, openblas-pthreads, openblas-serial or other.
inline char const *blas_name() {
  if (scipy_openblas_get_parallel) {
    int const p = scipy_openblas_get_parallel();
    return p == 2   ? "scipy-openblas-openmp"
           : p == 1 ? "scipy-openblas-pthreads"
                    : "scipy-openblas-serial";
  }
  if (!openblas_get_parallel)
    return "other";
  int const p = openblas_get_parallel();
  return p == 2 ? "openblas-openmp" : p == 1 ? "openblas-pthreads" : "openblas-serial";
}

inline double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return std::nan("");
  std::sort(v.begin(), v.end());
  return v[std::size_t(q * double(v.size() - 1) + 0.5)];
}
inline double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

// P(at least `wins` of `n` fair coin flips), summed in logs (n may be large): the one-sided sign
// test's p-value that a variant winning `wins` of `n` paired repetitions is no faster.
inline double sign_test_p(long wins, long n) {
  double p = 0;
  for (long k = wins; k <= n; ++k)
    p += std::exp(std::lgamma(double(n) + 1) - std::lgamma(double(k) + 1) -
                  std::lgamma(double(n - k) + 1) - double(n) * std::log(2.0));
  return std::min(p, 1.0);
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// How long one run takes, in ms: the host's clock by default; a GPU benchmark times with events.
using run_timer = std::function<double(std::function<void()> const &)>;
inline double host_ms(std::function<void()> const &run) {
  auto const t0 = std::chrono::steady_clock::now();
  run();
  return ms_since(t0);
}
// The same by a CPU clock (CLOCK_THREAD_CPUTIME_ID, CLOCK_PROCESS_CPUTIME_ID): on a machine
// shared with other work, the CPU time a run took inflates far less than the wall clock.
inline double cpu_ms(clockid_t clock, std::function<void()> const &run) {
  auto now = [clock] {
    timespec t{};
    clock_gettime(clock, &t);
    return 1e3 * double(t.tv_sec) + 1e-6 * double(t.tv_nsec);
  };
  double const t0 = now();
  run();
  return now() - t0;
}
inline double thread_cpu_ms(std::function<void()> const &run) {
  return cpu_ms(CLOCK_THREAD_CPUTIME_ID, run);
}
inline double process_cpu_ms(std::function<void()> const &run) {
  return cpu_ms(CLOCK_PROCESS_CPUTIME_ID, run);
}

// Times of `reps` repetitions of every variant, interleaved: each repetition runs all variants in
// a rotating order, so that drifts of the machine hit all of them alike. run(v) runs variant v
// once. times[v][r] is variant v in repetition r (paired across variants).
inline std::vector<std::vector<double>> interleaved(int variants, int reps,
                                                    std::function<void(int)> const &run,
                                                    run_timer const &time = host_ms) {
  std::vector<std::vector<double>> t(static_cast<std::size_t>(variants));
  for (auto &tv : t)
    tv.resize(std::size_t(reps));
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < variants; ++k) {
      int const v = (r + k) % variants;
      t[std::size_t(v)][std::size_t(r)] = time([&] { run(v); });
    }
  return t;
}
// The same over a list of variants, each run once untimed first (a warm-up).
inline std::vector<std::vector<double>>
interleaved(std::vector<std::function<void()>> const &variants, int reps,
            run_timer const &time = host_ms) {
  for (auto const &v : variants)
    v();
  return interleaved(
      int(variants.size()), reps, [&](int v) { variants[std::size_t(v)](); }, time);
}

// The median over paired repetitions of a[r] / b[r]: a variant's time relative to a baseline's.
inline double paired_ratio(std::vector<double> const &a, std::vector<double> const &b) {
  std::vector<double> q(a.size());
  for (std::size_t r = 0; r < a.size(); ++r)
    q[r] = a[r] / b[r];
  return median(q);
}

// A variant against a baseline over paired repetitions: the median of (baseline - variant), the
// repetitions the variant won and the sign test's p-value.
struct paired {
  double median_saving_ms;
  long wins, n;
  double p;
};
inline paired compare(std::vector<double> const &variant, std::vector<double> const &baseline) {
  std::vector<double> d(variant.size());
  long wins = 0;
  for (std::size_t r = 0; r < variant.size(); ++r) {
    d[r] = baseline[r] - variant[r];
    wins += d[r] > 0;
  }
  return {median(d), wins, long(d.size()), sign_test_p(wins, long(d.size()))};
}

// This program's path (to run itself again in a fresh process, e.g. with --memory).
inline std::string executable_path() {
  char buf[4096];
  ssize_t const n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
}

// Runs this program again in a fresh process with `--threads N --memory VARIANT` and `extra`
// arguments, and returns the number it prints (a memory_probe's MiB); nan when that fails.
inline double memory_in_fresh_process(int threads, std::string const &variant,
                                      std::string const &extra = "") {
  std::string const cmd = executable_path() + " --threads " + std::to_string(threads) +
                          " --memory " + variant + (extra.empty() ? "" : " " + extra);
  double mib = std::nan("");
  if (std::FILE *p = popen(cmd.c_str(), "r")) {
    if (std::fscanf(p, "%lf", &mib) != 1)
      mib = std::nan("");
    pclose(p);
  }
  return mib;
}

// The memory a run adds over what is resident before it: the peak resident set (VmHWM) during
// the run minus the resident set (VmRSS) at its start. The kernel's high-water mark is reset
// first (/proc/self/clear_refs, Linux >= 4.0), so what ran before does not count. Run it in a
// fresh process (--memory), cold: memory that pools or allocators kept from earlier runs would be
// reused without showing.
class memory_probe {
public:
  memory_probe() {
    if (std::FILE *f = std::fopen("/proc/self/clear_refs", "w")) {
      std::fputs("5", f);
      std::fclose(f);
    }
    before_kib_ = status_kib("VmRSS:");
  }
  double added_mib() const { return double(status_kib("VmHWM:") - before_kib_) / 1024.0; }

private:
  static long status_kib(char const *field) {
    long kib = -1;
    if (std::FILE *f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      std::size_t const n = std::strlen(field);
      while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, field, n) == 0)
          kib = std::atol(line + n);
      std::fclose(f);
    }
    return kib;
  }
  long before_kib_;
};

} // namespace bench
