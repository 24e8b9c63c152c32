// The tape problems of tests/cases/tape_cases.hpp, each compiled by nvcc in one translation unit
// of tests/cuda/tape_cases_gpu*.cu and taken by the others from here (the laws CPU == GPU run
// them all; compiling each problem's body once keeps every unit's compile short).
#pragma once

#include "../cases/tape_cases.hpp"

dualcast_tests::tape_problem dualcast_gpu_lstm_step_problem(); // tape_cases_gpu.cu
dualcast_tests::tape_problem dualcast_gpu_mlp_problem();       // tape_cases_gpu.cu
dualcast_tests::tape_problem dualcast_gpu_ops_problem();       // tape_cases_gpu_ops.cu
dualcast_tests::tape_problem dualcast_gpu_torch_ops_problem(); // tape_cases_gpu_ops.cu
