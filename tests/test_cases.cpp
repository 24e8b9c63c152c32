// The backend-independent test bodies of tests/cases/, run on the CPU backend.
#include "cases/kernel_law.hpp"
#include "cases/lstm_case.hpp"

#include <doctest/doctest.h>

namespace dc = dualcast;
using namespace dualcast_tests;

TEST_CASE("lstm case on the CPU backend: values, partials and VJP with a broadcast input") {
  for (int threads : {1, 2}) {
    host_memory_of<float> mf;
    CHECK(check_lstm_case<float>(dc::cpu{threads}, mf, 67, 129) == "");
    host_memory_of<double> md;
    CHECK(check_lstm_case<double>(dc::cpu{threads}, md, 300, 131) == "");
  }
}

// The CPU == GPU law's kernel side on the host (tests/cases/kernel_law.hpp): a 1-thread and a
// 2-thread executor give the same bits in every mode and layout (on a GPU, tests/cuda/cases_gpu.cu
// compares the CPU to CUDA).
TEST_CASE("kernel law on the CPU backend: 1 thread == 2 threads, bit for bit") {
  host_memory_of<float> mf;
  CHECK(kernel_law<float>(dc::cpu{2}, mf, true) == "");
  host_memory_of<double> md;
  CHECK(kernel_law<double>(dc::cpu{2}, md, true) == "");
}

TEST_CASE("kernel law's comparison: bits or a bound in ulps, mismatches reported") {
  std::vector<float> a{1.0F, -2.5F, 0.0F}, b = a;
  CHECK(compare_results("same", a, b, bound{0, 0}) == "");
  b[1] = std::nextafter(b[1], 0.0F);
  CHECK(compare_results("one ulp", a, b, bound{0, 0}) != "");
  CHECK(compare_results("one ulp", a, b, bound{2, 1}) == "");
  b[2] = 1e-6F; // 8.4 ulp of 1 from 0
  CHECK(compare_results("near zero", a, b, bound{8, 1}) != "");
  CHECK(compare_results("near zero", a, b, bound{16, 1}) == "");
  std::vector<float> zeros{0.0F}, negative_zeros{-0.0F};
  CHECK(compare_results("signed zeros", zeros, negative_zeros, bound{0, 0}) != "");
}
