// bench/element_access.cpp: what checked element access costs (issue 12: "operator() checked at
// least in debug builds, with the cost measured in release").
//
// Sums a 1024 x 1024 double tensor element by element through: at(i, j) (rank and bounds checked,
// always), operator()(i, j) (checked unless NDEBUG: this Release build defines NDEBUG, so
// unchecked here), and a raw pointer loop; then writes every element through at() and
// operator() (each write bumps the storage version). Interleaved repetitions; medians.
// Output: CSV rows benchmark,variant,size,threads,median_ms,ns_per_element,ratio_to_raw.
//   element_access [--reps N] [--quick] [--threads N (ignored: one thread)]
#include "common.hpp"

#include <dualcast/tensor/tensor.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace dc = dualcast;

namespace {
using clock_type = std::chrono::steady_clock;
using bench::median;
volatile double sink = 0; // keeps the sums alive
} // namespace

int main(int argc, char **argv) {
  int const reps = bench::parse(argc, argv, 21, 5).reps;
  dc::index_t const n = 1024;
  auto x = dc::tensor<double>::full({n, n}, 0.5);
  auto timed = [](auto f) {
    auto t0 = clock_type::now();
    f();
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  };
  char const *names[] = {"read at()",  "read operator()",  "read raw pointer",
                         "write at()", "write operator()", "write raw pointer"};
  std::vector<double> ms[6];
  for (int r = 0; r < reps; ++r) {
    ms[0].push_back(timed([&] {
      double s = 0;
      for (dc::index_t i = 0; i < n; ++i)
        for (dc::index_t j = 0; j < n; ++j)
          s += x.at(i, j);
      sink = s;
    }));
    ms[1].push_back(timed([&] {
      double s = 0;
      for (dc::index_t i = 0; i < n; ++i)
        for (dc::index_t j = 0; j < n; ++j)
          s += x(i, j);
      sink = s;
    }));
    ms[2].push_back(timed([&] {
      double s = 0;
      double const *p = x.data();
      for (dc::index_t i = 0; i < n; ++i)
        for (dc::index_t j = 0; j < n; ++j)
          s += p[i * n + j];
      sink = s;
    }));
    ms[3].push_back(timed([&] {
      for (dc::index_t i = 0; i < n; ++i)
        for (dc::index_t j = 0; j < n; ++j)
          x.at(i, j) = double(j);
    }));
    ms[4].push_back(timed([&] {
      for (dc::index_t i = 0; i < n; ++i)
        for (dc::index_t j = 0; j < n; ++j)
          x(i, j) = double(j);
    }));
    ms[5].push_back(timed([&] {
      double *p = x.mutable_data();
      for (dc::index_t i = 0; i < n; ++i)
        for (dc::index_t j = 0; j < n; ++j)
          p[i * n + j] = double(j);
    }));
  }
  std::printf("benchmark,variant,size,threads,median_ms,ns_per_element,ratio_to_raw\n");
  for (int v = 0; v < 6; ++v) {
    double const m = median(ms[v]), raw = median(ms[v < 3 ? 2 : 5]);
    std::printf("element_access,%s,%ld,1,%.3f,%.3f,%.2f\n", names[v], long(n * n), m,
                m * 1e6 / double(n * n), m / raw);
  }
}
