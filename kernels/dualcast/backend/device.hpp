// dualcast/backend/device.hpp: where memory lives (a device: host or a CUDA GPU) and the
// interface through which a backend allocates it (memory_resource). Part of the backend seam:
// each backend provides a memory resource for its devices; the tape's tensors pool them
// (dualcast/memory.hpp).
#pragma once

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
class memory_resource {
public:
  virtual ~memory_resource() = default;
  virtual void *allocate(std::size_t bytes, device const &d) = 0;
  virtual void deallocate(void *p, std::size_t bytes, device const &d) noexcept = 0;
};

} // namespace dualcast
