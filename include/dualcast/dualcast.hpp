// dualcast/dualcast.hpp: everything for host code (dual numbers, math, kernels, the CPU backend).
// CUDA code includes <dualcast/cuda.cuh> in addition.
#pragma once

#include <dualcast/backend/cpu.hpp>
#include <dualcast/broadcast.hpp>
#include <dualcast/cells.hpp>
#include <dualcast/config.hpp>
#include <dualcast/dual.hpp>
#include <dualcast/errors.hpp>
#include <dualcast/for_each.hpp>
#include <dualcast/kernel.hpp>
#include <dualcast/math.hpp>
#include <dualcast/shape.hpp>
#include <dualcast/view.hpp>
