// bench/gradbench/modules/all.hpp: every module the GradBench tool answers, registered in one
// place -- the tool (dualcast_gradbench.cpp) and its fuzz target (tests/fuzz/fuzz_gradbench.cpp)
// serve the same set.
#pragma once

#include "../registry.hpp"
#include "ba.hpp"
#include "det.hpp"
#include "gmm.hpp"
#include "ht.hpp"
#include "kmeans.hpp"
#include "llsq.hpp"
#include "lse.hpp"
#include "lstm.hpp"
#include "ode.hpp"
#include "particle.hpp"
#include "saddle.hpp"

namespace gradbench {

inline registry all_modules() {
  registry m;
  ba::add(m);
  det::add(m);
  gmm::add(m);
  ht::add(m);
  kmeans::add(m);
  llsq::add(m);
  lse::add(m);
  lstm::add(m);
  ode::add(m);
  particle::add(m);
  saddle::add(m);
  return m;
}

} // namespace gradbench
