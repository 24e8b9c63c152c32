// The second translation unit of the libFuzzer target fuzz_tape (see fuzz_tape.cpp): the template
// instructions and mean of tape_programs.hpp, whose lazy and unfused kernels are most of the
// target's compile time; CI builds it without optimisation, in parallel with the rest.
#define TAPE_FUZZ_SPLIT
#define TAPE_FUZZ_LAZY_TU
#include "tape_programs.hpp"
