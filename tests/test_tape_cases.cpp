// The tape cases (tests/cases/tape_cases.hpp) on host tensors; the same bodies run on CUDA
// tensors in tests/cuda/tape_cases_gpu.cu.
#include "cases/tape_cases.hpp"

#include <doctest/doctest.h>

namespace dc = dualcast;
using namespace dualcast_tests;

TEST_CASE("tape case on the CPU backend: LSTM step with matmuls") {
  CHECK(lstm_step_case(dc::device::host()) == "");
}
TEST_CASE("tape case on the CPU backend: MLP with log_softmax and gather") {
  CHECK(mlp_case(dc::device::host()) == "");
}
TEST_CASE("tape case on the CPU backend: reductions, softmax, shape ops, indexing") {
  CHECK(ops_case(dc::device::host()) == "");
}
TEST_CASE("tape case on the CPU backend: parallel primitives and a divergent fused node") {
  CHECK(primitives_case(dc::device::host()) == "");
}
TEST_CASE("tape case on the CPU backend: PyTorch-style operations") {
  CHECK(torch_ops_case(dc::device::host()) == "");
}
TEST_CASE("tape case on the CPU backend: index operations with integer index tensors") {
  CHECK(index_tensors_case(dc::device::host()) == "");
}
TEST_CASE(
    "tape case on the CPU backend: sorted histograms with index tensors, cumsum of few rows") {
  CHECK(sorted_bins_case(dc::device::host()) == "");
}
// The CPU == GPU law's tape side on the host: a 1-thread and a 2-thread executor give the same
// bits in every case and mode (on a GPU, tests/cuda/tape_cases_gpu.cu compares the host to CUDA).
TEST_CASE("tape law on the CPU backend: 1 thread == 2 threads, bit for bit") {
  CHECK(tape_law(dc::device::host(), 0) == "");
}
TEST_CASE("tape law on the CPU backend, few long rows (chunks, pieces): 1 thread == 2 threads") {
  CHECK(long_rows_law(dc::device::host(), 0) == "");
}
