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
std::string dualcast_gpu_tape_two_streams_case();

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
// Streams (issue 17): two tapes on two user-created streams, driven by two threads at once, give
// bit for bit what the same steps give one after the other on the default stream
// (tests/cuda/tape_cases_gpu.cu).
TEST_CASE("tape on CUDA streams: two tapes on two streams from two threads equal sequential runs") {
  if (skip_without_gpu())
    return;
  CHECK(dualcast_gpu_tape_two_streams_case() == "");
}
