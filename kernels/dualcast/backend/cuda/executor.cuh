// dualcast/backend/cuda/executor.cuh: the CUDA executor value: kernels run on `stream`.
#pragma once

#include <cuda_runtime.h>

namespace dualcast {

struct cuda {
  cudaStream_t stream = nullptr;
  // Threads per block (clamped to the kernels' launch bounds, backend/cuda/launch.cuh).
  int block_size = 256;
  // The caller knows that every array operand is device memory (the tape's CUDA tensors), so no
  // launch asks CUDA where a pointer lives. With false (views of unknown origin) each launch
  // checks and reports host memory as dualcast::device_error.
  bool operands_on_device = false;
};

} // namespace dualcast
