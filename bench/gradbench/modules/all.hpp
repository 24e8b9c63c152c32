// bench/gradbench/modules/all.hpp: every module the GradBench tool answers, registered in one
// place -- the tool (dualcast_gradbench.cpp) and its fuzz target (tests/fuzz/fuzz_gradbench.cpp)
// serve the same set.
#pragma once

#include "../registry.hpp"
#include "ba.hpp"
#include "gmm.hpp"
#include "kmeans.hpp"
#include "llsq.hpp"
#include "lse.hpp"
#include "lstm.hpp"
#include "ode.hpp"

namespace gradbench {

inline registry all_modules() {
  registry m;
  ba::add(m);
  gmm::add(m);
  kmeans::add(m);
  llsq::add(m);
  lse::add(m);
  lstm::add(m);
  ode::add(m);
  return m;
}

} // namespace gradbench
