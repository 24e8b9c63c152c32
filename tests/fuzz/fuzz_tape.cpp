// libFuzzer target: the differential tape fuzzer (tape_programs.hpp). The input bytes decode into
// a tape program (any byte string is a valid one), which runs fused, lazy and unfused; values and
// gradients must agree (1e-12, the same finiteness) and match central differences. A mismatch
// prints the decoded program and aborts; so does any exception or sanitizer report.
//
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Ikernels \
//     tests/fuzz/fuzz_tape.cpp tests/fuzz/fuzz_tape_lazy.cpp -o fuzz_tape -lopenblas &&
//   ./fuzz_tape tests/fuzz/tape_corpus
//
// (fuzz_tape_lazy.cpp holds the template instructions' lazy and unfused kernels, most of the
// compile time: CI builds it at -O0 in parallel with this file.)
//
// DUALCAST_TAPE_FUZZ_WILD=1 in the environment adds wild programs (inf and NaN values), which
// currently fail (see "known" in tests/test_regressions.cpp).
#define TAPE_FUZZ_SPLIT
#include "tape_programs.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const *data, std::size_t size) {
  static bool const wild = [] {
    char const *v = std::getenv("DUALCAST_TAPE_FUZZ_WILD"); // NOLINT(concurrency-mt-unsafe)
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  std::string m = tape_fuzz::check(data, size, nullptr, wild);
  if (!m.empty()) {
    std::fprintf(stderr, "%s", m.c_str());
    std::abort();
  }
  return 0;
}
