// dualcast/backend/cuda/memory.cuh: the CUDA backend's memory: a cudaMalloc resource, the
// stream-ordered pool the tape's CUDA tensors use (tensor/detail/device_dispatch.hpp), and copies
// between devices on a stream.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/cuda/check.cuh>
#include <dualcast/backend/device.hpp>
#include <dualcast/backend/stream.hpp>
#include <dualcast/core/errors.hpp>

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
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

// Runs f() with GPU `index` current, restoring the previous one; for deallocation (noexcept, no
// device check: at process exit the runtime may be gone, and the calls then fail harmlessly).
template <class F> void on_gpu_noexcept(int index, F const &f) noexcept {
  int previous = 0;
  bool set = cudaGetDevice(&previous) == cudaSuccess && previous != index &&
             cudaSetDevice(index) == cudaSuccess;
  f();
  if (set)
    (void)cudaSetDevice(previous);
}

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
    on_gpu_noexcept(d.index, [&] { (void)cudaFree(p); });
  }
};

// The stream-ordered pool of CUDA memory: cudaMallocFromPoolAsync / cudaFreeAsync on the stream
// a block is allocated on (memory_resource::allocate_on; allocate: the default stream), from each
// GPU's default memory pool. The driver hands a freed block to a request on another stream only
// once the work issued on the freeing stream before the free is done (or makes that stream wait),
// so tapes on several streams share the pool. The pool's release threshold is raised (when it is
// still CUDA's 0) so that freed memory stays cached for the next step instead of going back to the
// system at each synchronisation. On a GPU without memory pools (cudaDevAttrMemoryPoolsSupported
// is 0) it falls back to cudaMalloc / cudaFree (cudaFree waits for the device: slower, as safe).
// Thread-safe. No GPU: cuda_error at the first allocation; out of memory: allocation_error naming
// the size (after one retry once the device is idle, when blocks freed on other streams may still
// have been waiting for their streams' work).
class cuda_pool_resource final : public memory_resource {
public:
  // GPUs with index at least this have no pool here (device_error).
  static constexpr int max_devices = 64;

  void *allocate(std::size_t bytes, device const &d) override {
    return allocate_on(bytes, d, stream_handle{});
  }
  void deallocate(void *p, std::size_t bytes, device const &d) noexcept override {
    deallocate_on(p, bytes, d, stream_handle{});
  }
  void *allocate_on(std::size_t bytes, device const &d, stream_handle s) override {
    if (d.is_host())
      throw device_error("dualcast::cuda_pool_resource: cannot allocate host memory");
    device_guard guard(d.index);
    if (d.index < 0 || d.index >= max_devices)
      throw device_error("dualcast::cuda_pool_resource: " + to_string(d) + ": more than " +
                         std::to_string(max_devices) + " GPUs");
    cudaMemPool_t pool = pool_of(d.index);
    auto *st = static_cast<cudaStream_t>(s.get());
    std::size_t const n = bytes > 0 ? bytes : 1;
    void *p = nullptr;
    auto attempt = [&] {
      return pool ? cudaMallocFromPoolAsync(&p, n, pool, st) : cudaMalloc(&p, n);
    };
    cudaError_t status = attempt();
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      if (cudaDeviceSynchronize() == cudaSuccess)
        status = attempt();
      if (status == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw allocation_error("dualcast: cannot allocate " + std::to_string(bytes) +
                               " bytes of device memory on " + to_string(d));
      }
    }
    check(status, pool ? "cudaMallocFromPoolAsync" : "cudaMalloc");
    account(n, true);
    return p;
  }
  void deallocate_on(void *p, std::size_t bytes, device const &d,
                     stream_handle s) noexcept override {
    if (!p)
      return;
    cudaMemPool_t pool = d.index >= 0 && d.index < max_devices
                             ? gpus_[d.index].pool.load(std::memory_order_acquire)
                             : nullptr;
    on_gpu_noexcept(d.index, [&] {
      if (pool)
        (void)cudaFreeAsync(p, static_cast<cudaStream_t>(s.get()));
      else
        (void)cudaFree(p);
    });
    account(bytes > 0 ? bytes : 1, false);
  }

  // Bytes handed out and not yet returned, and the largest that was (requested sizes).
  std::size_t bytes_in_use() const { return in_use_.load(std::memory_order_relaxed); }
  std::size_t peak_bytes_in_use() const { return peak_.load(std::memory_order_relaxed); }
  // Whether GPU `index` allocates from its memory pool (false: cudaMalloc, or not used yet).
  bool stream_ordered(int index) const {
    return index >= 0 && index < max_devices &&
           gpus_[index].pool.load(std::memory_order_acquire) != nullptr;
  }
  // Returns the cached memory of the pools used so far to the system (cudaMemPoolTrimTo 0, after
  // waiting for their GPUs): for other allocators of the process that run short.
  void release() noexcept {
    for (int i = 0; i < max_devices; ++i)
      if (cudaMemPool_t pool = gpus_[i].pool.load(std::memory_order_acquire))
        on_gpu_noexcept(i, [&] {
          (void)cudaDeviceSynchronize();
          (void)cudaMemPoolTrimTo(pool, 0);
        });
  }

private:
  struct gpu_state {
    std::once_flag once;
    std::atomic<cudaMemPool_t> pool{nullptr};
  };
  // GPU `index`'s default pool with the release threshold raised, or null without pool support
  // (its device is current).
  cudaMemPool_t pool_of(int index) {
    gpu_state &g = gpus_[index];
    std::call_once(g.once, [&] {
      int supported = 0;
      check(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, index),
            "cudaDeviceGetAttribute");
      if (!supported)
        return;
      cudaMemPool_t pool = nullptr;
      check(cudaDeviceGetDefaultMemPool(&pool, index), "cudaDeviceGetDefaultMemPool");
      std::uint64_t threshold = 0;
      check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
            "cudaMemPoolGetAttribute");
      if (threshold == 0) { // CUDA's default: keep what the process frees (unless set otherwise)
        threshold = UINT64_MAX;
        check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
              "cudaMemPoolSetAttribute");
      }
      g.pool.store(pool, std::memory_order_release);
    });
    return g.pool.load(std::memory_order_acquire);
  }
  void account(std::size_t n, bool allocated) {
    if (!allocated) {
      in_use_.fetch_sub(n, std::memory_order_relaxed);
      return;
    }
    std::size_t now = in_use_.fetch_add(n, std::memory_order_relaxed) + n;
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  gpu_state gpus_[max_devices];
  std::atomic<std::size_t> in_use_{0}, peak_{0};
};

// Copies n bytes on stream s; at least one side is a CUDA device. A copy to or from host memory
// waits for s (the destination is ready, and host memory readable, on return; the host source may
// be reused at once); a copy between two blocks of one GPU is ordered on s and returns at once; a
// copy between two GPUs waits for s (the other GPU's streams are not ordered after it).
inline void copy_bytes(void *dst, device const &dd, void const *src, device const &sd,
                       std::size_t n, stream_handle s = {}) {
  if (n == 0)
    return;
  device_guard guard(dd.is_host() ? sd.index : dd.index);
  auto *st = static_cast<cudaStream_t>(s.get());
  cudaMemcpyKind kind = dd.is_host()   ? cudaMemcpyDeviceToHost
                        : sd.is_host() ? cudaMemcpyHostToDevice
                                       : cudaMemcpyDeviceToDevice;
  if (!dd.is_host() && !sd.is_host() && dd.index != sd.index) {
    check(cudaMemcpyPeerAsync(dst, dd.index, src, sd.index, n, st), "cudaMemcpyPeerAsync");
    check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    return;
  }
  check(cudaMemcpyAsync(dst, src, n, kind, st), "cudaMemcpyAsync");
  if (kind != cudaMemcpyDeviceToDevice)
    check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
}

// Scratch device memory for one launch or a few: n elements from cudaMallocAsync on stream s,
// freed with cudaFreeAsync on the same stream when the owner goes (after the work issued on s
// before it). Out of memory: allocation_error naming the size.
struct stream_free {
  cudaStream_t stream = nullptr;
  void operator()(void *p) const noexcept { (void)cudaFreeAsync(p, stream); }
};
template <class T> using device_buffer = std::unique_ptr<T[], stream_free>;

template <class T> device_buffer<T> scratch_buffer(cudaStream_t s, index_t n) {
  void *p = nullptr;
  cudaError_t status = cudaMallocAsync(&p, static_cast<std::size_t>(n) * sizeof(T), s);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw allocation_error("dualcast: cannot allocate " + std::to_string(n * index_t(sizeof(T))) +
                           " bytes of device memory");
  }
  check(status, "cudaMallocAsync");
  return device_buffer<T>(static_cast<T *>(p), stream_free{s});
}

} // namespace dualcast::detail::cuda_backend
