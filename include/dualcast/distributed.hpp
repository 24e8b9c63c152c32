// dualcast/distributed.hpp: data-parallel training over MPI (needs <mpi.h>; CMake: link
// dualcast::distributed). See docs/distributed.md.
#pragma once

#include <dualcast/distributed/communicator.hpp>
#include <dualcast/distributed/data_parallel.hpp>
#include <dualcast/distributed/sampler.hpp>
