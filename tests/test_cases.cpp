// The backend-independent test bodies of tests/cases/, run on the CPU backend.
#include "cases/lstm_case.hpp"
#include "cases/tape_cases.hpp"

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

// The tape cases (tests/cases/tape_cases.hpp) on host tensors; the same bodies run on CUDA
// tensors in tests/cuda/cases_gpu.cu.
TEST_CASE("tape case on the CPU backend: LSTM step with matmuls") {
  CHECK(lstm_step_case(dc::device::host()) == "");
}
TEST_CASE("tape case on the CPU backend: MLP with log_softmax and gather") {
  CHECK(mlp_case(dc::device::host()) == "");
}
TEST_CASE("tape case on the CPU backend: reductions, softmax, shape ops, indexing") {
  CHECK(ops_case(dc::device::host()) == "");
}
