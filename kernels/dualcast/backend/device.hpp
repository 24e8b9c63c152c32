// dualcast/backend/device.hpp: where memory lives (a device: host or a CUDA GPU) and the
// interface through which a backend allocates it (memory_resource). Part of the backend seam:
// each backend provides a memory resource for its devices; the tape's tensors pool them
// (dualcast/tensor/memory.hpp).
#pragma once

#include <dualcast/backend/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace dualcast {

// Where memory lives.
struct device {
  enum class kind : std::uint8_t { host, cuda };
  kind type = kind::host;
  int index = 0;

  static constexpr device host() { return {}; }
  static constexpr device cuda(int i = 0) { return {kind::cuda, i}; }
  bool is_host() const { return type == kind::host; }
  friend constexpr bool operator==(device const &a, device const &b) {
    return a.type == b.type && (a.type == kind::host || a.index == b.index);
  }
};

inline std::string to_string(device const &d) {
  return d.is_host() ? std::string("host") : "cuda:" + std::to_string(d.index);
}

// Allocates and frees raw memory on one device.
//
// allocate_on / deallocate_on are the stream-ordered forms (storage blocks of CUDA tensors use
// them with the current stream, backend/stream.hpp): the block may be used by work on stream s
// issued after allocate_on returns, and deallocate_on frees it once the work issued on s before
// it is done. A stream-ordered resource (the CUDA pool) frees on s without waiting; the default
// forms ignore the stream, which is right for a resource whose blocks are usable on every stream
// as soon as they are handed out and not reused before the device is done with them (host memory;
// cudaMalloc / cudaFree, which synchronises the device).
class memory_resource {
public:
  virtual ~memory_resource() = default;
  virtual void *allocate(std::size_t bytes, device const &d) = 0;
  virtual void deallocate(void *p, std::size_t bytes, device const &d) noexcept = 0;
  virtual void *allocate_on(std::size_t bytes, device const &d, stream_handle) {
    return allocate(bytes, d);
  }
  virtual void deallocate_on(void *p, std::size_t bytes, device const &d, stream_handle) noexcept {
    deallocate(p, bytes, d);
  }
};

} // namespace dualcast
