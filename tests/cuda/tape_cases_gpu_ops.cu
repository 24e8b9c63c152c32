// The tape cases of the operations on CUDA tensors: reductions, softmax, shape operations and
// indexing; the PyTorch-style operations (tests/cases/tape_cases.hpp; see tape_cases_gpu.cu).
#include <dualcast/cuda.cuh>

#include "../cases/tape_cases.hpp"
#include "tape_problems_gpu.hpp"

#include <string>

dualcast_tests::tape_problem dualcast_gpu_ops_problem() { return dualcast_tests::ops_problem(); }
dualcast_tests::tape_problem dualcast_gpu_torch_ops_problem() {
  return dualcast_tests::torch_ops_problem();
}

std::string dualcast_gpu_tape_ops_case() {
  return dualcast_tests::check_tape_case(dualcast_gpu_ops_problem(), dualcast::device::cuda(0));
}
std::string dualcast_gpu_tape_torch_ops_case() {
  return dualcast_tests::check_tape_case(dualcast_gpu_torch_ops_problem(),
                                         dualcast::device::cuda(0));
}
