// GPU tests: the same bodies as the CPU tests (tests/cases/), run on the CUDA backend. Without a
// usable GPU each test prints DUALCAST_SKIPPED, which ctest reports as skipped (never passed).
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

bool dualcast_gpu_available();
std::string dualcast_gpu_lstm_case_float();
std::string dualcast_gpu_lstm_case_double();
std::string dualcast_gpu_tape_lstm_step_case();
std::string dualcast_gpu_tape_mlp_case();
std::string dualcast_gpu_tape_ops_case();
std::string dualcast_gpu_tape_primitives_case();
std::string dualcast_gpu_tape_torch_ops_case();
std::string dualcast_gpu_tape_index_tensors_case();
std::string dualcast_gpu_kernel_law_float();
std::string dualcast_gpu_kernel_law_double();
std::string dualcast_gpu_tape_law();
std::string dualcast_gpu_long_rows_law();
std::string dualcast_gpu_tape_two_streams_case();
std::string dualcast_gpu_float16_lstm_case();
std::string dualcast_gpu_cub_primitives();
std::string dualcast_gpu_cub_tape_law();
std::string dualcast_gpu_tape_sorted_bins_case();

namespace {
bool skip_without_gpu() {
  if (dualcast_gpu_available())
    return false;
  std::printf("DUALCAST_SKIPPED: no CUDA device\n");
  return true;
}
} // namespace

TEST_CASE("lstm case on the CUDA backend (float)") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_lstm_case_float() == "");
}

// Issue 37: bfloat16 / half gates beside a float cell state, value_and_vjp, CUDA against the CPU.
TEST_CASE(
    "16-bit lstm case on the CUDA backend: bfloat16 and half gates beside a float cell state") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_float16_lstm_case() == "");
}

// Issue 40: CUB's device-wide primitives (reduce, segmented reduce, scan, sorted histogram)
// against the CPU, and the run-to-run determinism CUB documents.
TEST_CASE("CUB's device-wide primitives on the CUDA backend against the CPU") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_cub_primitives() == "");
}

// The same through the tape with every cuda_primitives choice set to CUB (cumsum, the sorted
// histogram with int32 / int64 device indices, the reductions): finite differences and CPU == GPU.
TEST_CASE("CUB's primitives through the tape: sorted histograms, cumsum, reductions vs the CPU") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_cub_tape_law() == "");
}

TEST_CASE("lstm case on the CUDA backend (double)") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_lstm_case_double() == "");
}

// The tape on CUDA tensors: the bodies of tests/cases/tape_cases.hpp (run on host tensors by
// case_tests).
TEST_CASE("tape case on the CUDA backend: LSTM step with matmuls") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_lstm_step_case() == "");
}
TEST_CASE("tape case on the CUDA backend: MLP with log_softmax and gather") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_mlp_case() == "");
}
TEST_CASE("tape case on the CUDA backend: reductions, softmax, shape ops, indexing") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_ops_case() == "");
}
TEST_CASE("tape case on the CUDA backend: parallel primitives and a divergent fused node") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_primitives_case() == "");
}

TEST_CASE("tape case on the CUDA backend: PyTorch-style operations") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_torch_ops_case() == "");
}
// The index operations reading integer index tensors made on the device (no host copy per call).
TEST_CASE("tape case on the CUDA backend: index operations with integer index tensors") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_index_tensors_case() == "");
}

// reduce_by_index's sorted paths with int32 / int64 device indices, cumsum of few rows (own
// passes).
TEST_CASE(
    "tape case on the CUDA backend: sorted histograms with index tensors, cumsum of few rows") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_sorted_bins_case() == "");
}

// CPU == GPU: the same inputs through both backends, compared directly (tests/cases/kernel_law.hpp
// and tape_law in tests/cases/tape_cases.hpp state the bounds).
TEST_CASE("CPU == GPU: every fused-kernel mode, layout and divergent branches (float)") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_kernel_law_float() == "");
}
TEST_CASE("CPU == GPU: every fused-kernel mode, layout and divergent branches (double)") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_kernel_law_double() == "");
}
TEST_CASE("CPU == GPU: every tape case and mode, losses and gradients") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_law() == "");
}
TEST_CASE("CPU == GPU: few long rows (chunked sums and extrema, scans and recurrences in pieces)") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_long_rows_law() == "");
}

// Streams (issue 17): two tapes on two user-created streams, driven by two threads at once, give
// bit for bit what the same steps give one after the other on the default stream
// (tests/cuda/tape_cases_gpu.cu).
TEST_CASE("tape on CUDA streams: two tapes on two streams from two threads equal sequential runs") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_two_streams_case() == "");
}
