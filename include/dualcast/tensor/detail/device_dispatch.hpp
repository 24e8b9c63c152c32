// dualcast/tensor/detail/device_dispatch.hpp: which executor a tape operation runs on.
//
// Tensors carry their device; an operation looks at its operands' device and runs its body (a
// generic lambda taking the executor) on the CPU executor for host tensors and on the CUDA
// executor for CUDA tensors. This is the one header of the tape that binds devices to backends:
// the CPU backend always, the CUDA backend (and the pool of CUDA memory) in translation units
// compiled by nvcc; in a host-compiler translation unit a CUDA tensor reaching an operation
// throws device_error naming the operation and the device. The operations themselves call only
// the hooks of the backend seam (backend/seam.hpp) on the executor they are given.
//
// One program may contain both kinds of translation units. The tape's classes (tensor, var, tape,
// expr) live in an inline namespace whose name says which kind compiled them (DUALCAST_TAPE_ABI),
// so the inline functions of the two kinds have different symbols and the linker cannot merge a
// host-only instantiation with a CUDA-capable one. The price: a tensor of an nvcc translation
// unit is another type than one of a g++ translation unit (pass raw data or views between them).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/backend/cpu.hpp>
#include <dualcast/backend/seam.hpp>
#include <dualcast/backend/stream.hpp>
#include <dualcast/broadcast/for_each.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tensor/memory.hpp>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__CUDACC__)
#define DUALCAST_TAPE_ABI tape_cuda
#include <dualcast/backend/cuda.cuh>
#include <dualcast/backend/cuda/memory.cuh>
#else
#define DUALCAST_TAPE_ABI tape_host
#endif

namespace dualcast::detail {
inline namespace DUALCAST_TAPE_ABI {

// Whether this translation unit can run tape operations on CUDA tensors.
#if defined(__CUDACC__)
inline constexpr bool cuda_tape_available = true;
#else
inline constexpr bool cuda_tape_available = false;
#endif

#if defined(__CUDACC__)
// The pool CUDA tensors use unless told otherwise (one per process, all GPUs): stream-ordered
// (backend/cuda/memory.cuh), each block allocated and freed on the stream that was current when
// its tensor was made, so tapes on different streams share it.
inline cuda_backend::cuda_pool_resource &cuda_pool() {
  static cuda_backend::cuda_pool_resource pool;
  return pool;
}
#endif

// The memory resource tensors on d use unless told otherwise: the host pool, or the CUDA pool in
// nvcc translation units (elsewhere the host pool's upstream rejects CUDA devices with
// device_error).
inline memory_resource &default_resource(device const &d) {
#if defined(__CUDACC__)
  if (!d.is_host())
    return cuda_pool();
#else
  (void)d;
#endif
  return default_pool();
}

[[noreturn]] inline void no_cuda_here(char const *op, device const &d) {
  throw device_error(std::string(op) + ": tensor on " + to_string(d) +
                     ", but this translation unit computes on host only: tape operations on CUDA "
                     "tensors run in .cu files compiled by nvcc (include <dualcast/cuda.cuh>)");
}

// The CPU executor of tensor-level operations on this thread (a copy to make a tensor contiguous,
// a zero fill, a gradient accumulation): the one of the operation running on this thread -- a
// tape's `ex` while one of its operations or its backward runs (on_device below sets it) -- and
// cpu{} (OpenMP's default thread count) elsewhere. Without it a tape on cpu{1} ran the tensor
// operations inside its operations on every thread.
inline cpu &ambient_cpu_slot() {
  thread_local cpu ex{};
  return ex;
}
inline cpu ambient_cpu() { return ambient_cpu_slot(); }
class ambient_cpu_scope {
public:
  explicit ambient_cpu_scope(cpu const &ex) : saved_(ambient_cpu_slot()) {
    ambient_cpu_slot() = ex;
  }
  ambient_cpu_scope(ambient_cpu_scope const &) = delete;
  ambient_cpu_scope &operator=(ambient_cpu_scope const &) = delete;
  ~ambient_cpu_scope() { ambient_cpu_slot() = saved_; }

private:
  cpu saved_;
};

// Runs f(ex) with the executor of device d: `host` for host tensors (also the ambient CPU
// executor while f runs); for CUDA tensors a CUDA executor on this thread's current stream
// (backend/stream.hpp: the tape's stream while its operations run, see tape/tape.hpp), with d's GPU
// current. Tensors know their device, so its launches skip the pointer checks.
template <class F>
decltype(auto) on_device(char const *op, device const &d, cpu const &host, F &&f) {
  if (d.is_host()) {
    ambient_cpu_scope const scope(host);
    return std::forward<F>(f)(host);
  }
#if defined(__CUDACC__)
  (void)op;
  cuda_backend::device_guard guard(d.index);
  cuda ex;
  ex.stream = static_cast<cudaStream_t>(current_stream().get());
  ex.operands_on_device = true;
  return std::forward<F>(f)(ex);
#else
  no_cuda_here(op, d);
#endif
}
template <class F>
decltype(auto) on_device(std::string const &op, device const &d, cpu const &host, F &&f) {
  return on_device(op.c_str(), d, host, std::forward<F>(f));
}

// Copies n bytes between (possibly different) devices on the current stream; host memory is
// ready on return, device memory in the stream's order (backend/cuda/memory.cuh, copy_bytes).
inline void copy_bytes(char const *op, void *dst, device const &dd, void const *src,
                       device const &sd, std::size_t n) {
  if (dd.is_host() && sd.is_host()) {
    if (n > 0)
      std::memcpy(dst, src, n);
    return;
  }
#if defined(__CUDACC__)
  (void)op;
  cuda_backend::copy_bytes(dst, dd, src, sd, n, current_stream());
#else
  no_cuda_here(op, dd.is_host() ? sd : dd);
#endif
}

} // namespace DUALCAST_TAPE_ABI

// f(i) for i in [0, n) on the executor's device (dualcast::for_each); `cost` estimates the work of
// one index.
template <class Ex, class F> void parallel_for(Ex const &ex, index_t n, index_t cost, F const &f) {
  dualcast::for_each(ex, n, f, cost);
}
// f(r, lanes) for every row r in [0, rows): a row operation written over lanes (backend/seam.hpp,
// backend_for_each_row): one thread per row on the CPU, one warp per row on CUDA. `cost`: the
// work of one row.
template <class Ex, class F>
void parallel_for_rows(Ex const &ex, index_t rows, index_t cost, F const &f) {
  static_assert(std::is_trivially_copyable_v<F>,
                "dualcast: a row operation's function object must be trivially copyable");
  backend_for_each_row(hook{}, ex, rows, cost, f);
}

// Every array operand of one operation on one device; else device_error naming the positions.
// devs[i] is the device of the array operand at argument position pos[i].
[[noreturn]] inline void devices_differ(char const *op, int pa, device const &a, int pb,
                                        device const &b) {
  throw device_error(std::string(op) + ": argument " + std::to_string(pa) + " is on " +
                     to_string(a) + " but argument " + std::to_string(pb) + " is on " +
                     to_string(b) +
                     " (all arrays of one operation must be on one device; move them with "
                     "tensor::to)");
}
inline device common_device(std::string const &op,
                            std::vector<std::pair<int, device>> const &devs) {
  for (std::size_t i = 1; i < devs.size(); ++i)
    if (!(devs[i].second == devs[0].second))
      devices_differ(op.c_str(), devs[0].first, devs[0].second, devs[i].first, devs[i].second);
  return !devs.empty() ? devs[0].second : device::host();
}
// The same for two operands (argument positions 0 and 1).
inline device common_device(char const *op, device const &a, device const &b) {
  if (!(a == b))
    devices_differ(op, 0, a, 1, b);
  return a;
}

} // namespace dualcast::detail
