// bench/gradbench/modules/common.hpp: what every module shares: the executor the tool runs on
// (GradBench compares tools single-threaded by default; `dualcast_gradbench --threads N` changes
// it) and the JSON / tensor conversions.
#pragma once

#include "../registry.hpp"

#include <dualcast/autodiff.hpp>

#include <vector>

namespace gradbench {

namespace dc = dualcast;

inline dc::cpu &executor() {
  static dc::cpu ex{1};
  return ex;
}

// A fresh tape on the tool's executor.
inline void use_executor(dc::tape &tp) { tp.ex = executor(); }

// Row-major values as nested JSON rows of `cols`.
inline json rows_of(std::vector<double> const &v, std::size_t cols) {
  json out = json::array();
  for (std::size_t i = 0; i < v.size(); i += cols)
    out.push_back(std::vector<double>(v.begin() + long(i), v.begin() + long(i + cols)));
  return out;
}

} // namespace gradbench
