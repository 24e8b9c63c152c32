// dualcast/dualcast.hpp: everything for host code (dual numbers, math, kernels, the CPU backend).
// CUDA code includes <dualcast/cuda.cuh> in addition.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/arrays/view.hpp>
#include <dualcast/backend/cpu.hpp>
#include <dualcast/broadcast/broadcast.hpp>
#include <dualcast/broadcast/for_each.hpp>
#include <dualcast/core/config.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/kernel/cells.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/math/functions.hpp>
#include <dualcast/numbers/dual.hpp>
