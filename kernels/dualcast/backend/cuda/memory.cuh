// dualcast/backend/cuda/memory.cuh: the CUDA backend's memory: a cudaMalloc resource (the tape
// pools it, detail/device_dispatch.hpp) and copies between devices.
#pragma once

#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/device.hpp>
#include <dualcast/errors.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace dualcast::detail::cuda_backend {

// Makes GPU `index` current for its lifetime and restores the previous one.
class device_guard {
public:
  explicit device_guard(int index) {
    require_device();
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index)
      check(cudaSetDevice(index), "cudaSetDevice");
    changed_ = previous_ != index;
  }
  device_guard(device_guard const &) = delete;
  device_guard &operator=(device_guard const &) = delete;
  ~device_guard() {
    if (changed_)
      (void)cudaSetDevice(previous_);
  }

private:
  int previous_ = 0;
  bool changed_ = false;
};

// cudaMalloc / cudaFree on the device's GPU. No GPU: cuda_error at the first allocation; out of
// memory: allocation_error naming the size.
class cuda_resource final : public memory_resource {
public:
  void *allocate(std::size_t bytes, device const &d) override {
    if (d.is_host())
      throw device_error("dualcast::cuda_resource: cannot allocate host memory");
    device_guard guard(d.index);
    void *p = nullptr;
    cudaError_t status = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw allocation_error("dualcast: cannot allocate " + std::to_string(bytes) +
                             " bytes of device memory on " + to_string(d));
    }
    check(status, "cudaMalloc");
    return p;
  }
  void deallocate(void *p, std::size_t, device const &d) noexcept override {
    int previous = 0;
    bool set = cudaGetDevice(&previous) == cudaSuccess && previous != d.index &&
               cudaSetDevice(d.index) == cudaSuccess;
    (void)cudaFree(p); // fails harmlessly when the runtime is already shut down (process exit)
    if (set)
      (void)cudaSetDevice(previous);
  }
};

// Copies n bytes; at least one side is a CUDA device. Synchronous: the destination is ready (and
// host memory readable) on return.
inline void copy_bytes(void *dst, device const &dd, void const *src, device const &sd,
                       std::size_t n) {
  if (n == 0)
    return;
  device_guard guard(dd.is_host() ? sd.index : dd.index);
  cudaMemcpyKind kind = dd.is_host()   ? cudaMemcpyDeviceToHost
                        : sd.is_host() ? cudaMemcpyHostToDevice
                                       : cudaMemcpyDeviceToDevice;
  if (!dd.is_host() && !sd.is_host() && dd.index != sd.index)
    check(cudaMemcpyPeer(dst, dd.index, src, sd.index, n), "cudaMemcpyPeer");
  else
    check(cudaMemcpy(dst, src, n, kind), "cudaMemcpy");
}

} // namespace dualcast::detail::cuda_backend
