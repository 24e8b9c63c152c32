// The tape test bodies of tests/cases/tape_cases.hpp on CUDA tensors: the whole tape instantiated
// for the CUDA executor (fused nodes store / recompute, lazy expressions, unfused mode,
// reductions, shape operations, softmax family, indexing, cuBLAS matmuls). Called from
// tests/test_gpu.cpp, which reports the tests skipped without a GPU.
#include <dualcast/cuda.cuh>

#include "../cases/tape_cases.hpp"

#include <string>

std::string dualcast_gpu_tape_lstm_step_case() {
  return dualcast_tests::lstm_step_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_mlp_case() {
  return dualcast_tests::mlp_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_ops_case() {
  return dualcast_tests::ops_case(dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_primitives_case() {
  return dualcast_tests::primitives_case(dualcast::device::cuda(0));
}
// CPU == GPU, the tape's side: every case on host tensors and on CUDA tensors, within 256 ulp of
// double (GPU reductions add in another order; see tests/cases/tape_cases.hpp).
std::string dualcast_gpu_tape_law() {
  return dualcast_tests::tape_law(dualcast::device::cuda(0), 256);
}
