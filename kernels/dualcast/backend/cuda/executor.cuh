// dualcast/backend/cuda/executor.cuh: the CUDA executor value: kernels run on `stream`.
#pragma once

#include <cuda_runtime.h>

namespace dualcast {

struct cuda {
  cudaStream_t stream = nullptr;
  int block_size = 256;
};

} // namespace dualcast
