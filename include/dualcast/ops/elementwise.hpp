// dualcast/ops/elementwise.hpp: every elementwise operation on tape variables -- the fused node
// (dualcast::fused), lazy operators and math functions materialised as ONE fused node
// (dualcast::eval), and unfused mode (dualcast::unfused, dualcast::call).
#pragma once

#include <dualcast/ops/fused.hpp>
#include <dualcast/ops/lazy/expr.hpp>
#include <dualcast/ops/lazy/materialize.hpp>
#include <dualcast/ops/lazy/operators.hpp>
#include <dualcast/ops/lazy/unfused.hpp>
