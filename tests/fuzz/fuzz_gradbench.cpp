// libFuzzer target: the GradBench tool's protocol reader (bench/gradbench/protocol.hpp) and its
// modules' input readers, on untrusted JSON lines. Each input is a session: its lines are served
// to gradbench::serve with every module of the tool, as the tool serves stdin. Every non-blank
// line must get exactly one response line, a JSON object with an "id" (null for a line that is
// not a message), and with an "error" string where "success" is false; a crash, a sanitizer
// report, an exception out of serve or an allocation over -malloc_limit_mb fails. The limits on
// stated sizes and repetitions are lowered (registry.hpp, input_limits) so that each evaluation
// stays small; the checks against them are the ones the tool runs with its defaults.
//
//   clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Ikernels \
//     -Iexamples tests/fuzz/fuzz_gradbench.cpp -o fuzz_gradbench -lopenblas &&
//   ./fuzz_gradbench -malloc_limit_mb=64 tests/fuzz/gradbench_corpus
#include "../../bench/gradbench/modules/all.hpp"
#include "../../bench/gradbench/protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace {

[[noreturn]] void failure(std::string const &what) {
  std::fprintf(stderr, "fuzz_gradbench: %s\n", what.c_str());
  std::abort();
}

gradbench::registry const &modules() {
  static gradbench::registry const r = [] {
    gradbench::input_limits() = {256, 2, 1e-3}; // (the seeds need 66 elements, 2 runs)
    return gradbench::all_modules();
  }();
  return r;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const *data, std::size_t size) {
  std::string const session(reinterpret_cast<char const *>(data), size);
  std::istringstream in(session);
  std::ostringstream out;
  try {
    gradbench::serve(modules(), in, out);
  } catch (std::exception const &e) {
    failure(std::string("an exception out of serve: ") + e.what());
  }
  // One response per non-blank line, in order.
  std::istringstream lines(session), responses(out.str());
  std::string line, response;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    if (!std::getline(responses, response))
      failure("no response to the line: " + line.substr(0, 200));
    gradbench::json r;
    try {
      r = gradbench::json::parse(response);
    } catch (std::exception const &e) {
      failure("a response that is not JSON: " + response.substr(0, 200));
    }
    if (!r.is_object() || !r.contains("id"))
      failure("a response without an id: " + response.substr(0, 200));
    if (r.contains("success") && !r["success"].get<bool>() &&
        (!r.contains("error") || !r["error"].is_string() || r["error"].get<std::string>().empty()))
      failure("a failure without an error message: " + response.substr(0, 200));
  }
  if (std::getline(responses, response))
    failure("more responses than messages: " + response.substr(0, 200));
  return 0;
}
