// The tape case of the parallel primitives on CUDA tensors, and the laws CPU == GPU over every
// tape case (tests/cases/tape_cases.hpp; see tape_cases_gpu.cu).
#include <dualcast/cuda.cuh>

#include "../cases/tape_cases.hpp"
#include "tape_problems_gpu.hpp"

#include <string>

std::string dualcast_gpu_tape_primitives_case() {
  return dualcast_tests::primitives_case(dualcast::device::cuda(0));
}
// CPU == GPU, the tape's side: every case on host tensors and on CUDA tensors, within 256 ulp of
// double (GPU reductions add in another order; see tests/cases/tape_cases.hpp). The problems of
// tape_law_problems(), in its order, four of them compiled in the other files.
std::string dualcast_gpu_tape_law() {
  return dualcast_tests::tape_law({dualcast_gpu_lstm_step_problem(), dualcast_gpu_mlp_problem(),
                                   dualcast_gpu_ops_problem(), dualcast_tests::primitives_problem(),
                                   dualcast_gpu_torch_ops_problem()},
                                  dualcast::device::cuda(0), 256);
}
// Few long rows (whole-array sums cut into chunks, max / min over chunks, scans and recurrences
// in pieces): the GPU against the host within 1e-10 relative (other addition orders).
std::string dualcast_gpu_long_rows_law() {
  return dualcast_tests::long_rows_law(dualcast::device::cuda(0), 1e-10);
}
