// dualcast/backend/cuda/check.cuh: every CUDA runtime call goes through check(), which turns a
// failure into dualcast::cuda_error carrying CUDA's own error string and the call that failed.
#pragma once

#include <dualcast/core/errors.hpp>

#include <cuda_runtime.h>

#include <atomic>
#include <string>

namespace dualcast::detail::cuda_backend {

inline void check(cudaError_t status, char const *what) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky-free error state so later calls can proceed
    throw cuda_error(std::string("dualcast: ") + what + " failed: " + cudaGetErrorName(status) +
                     ": " + cudaGetErrorString(status));
  }
}

// Throws a clear error at first use on a machine without a usable GPU. Once a GPU was found the
// answer is kept (a device does not go away), so launches do not ask again.
inline void require_device() {
  static std::atomic<bool> found{false};
  if (found.load(std::memory_order_relaxed))
    return;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw cuda_error(std::string("dualcast: the CUDA backend needs a GPU, but none is usable (") +
                     (status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device found") +
                     ")");
  }
  found.store(true, std::memory_order_relaxed);
}

// Host memory passed to a CUDA kernel is a device_error naming the operand.
inline void require_device_pointer(void const *p, char const *op, int operand) {
  if (!p)
    return;
  cudaPointerAttributes attr{};
  check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    throw device_error(std::string(op) + ": array operand " + std::to_string(operand) +
                       " is in host memory but the call runs on the CUDA device");
}

} // namespace dualcast::detail::cuda_backend
