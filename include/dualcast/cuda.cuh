// dualcast/cuda.cuh: everything, plus the CUDA backend (executor dualcast::cuda). For .cu files.
#pragma once

#include <dualcast/backend/cuda.cuh>
#include <dualcast/dualcast.hpp>
