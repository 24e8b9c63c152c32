// The differential tape fuzzer (tests/fuzz/tape_programs.hpp) on a fixed-seed batch of random
// programs: every program runs fused (one node per elementwise group), lazy (plain lazy operators,
// a finer fusion) and unfused (one node per operation, dualcast's unfused mode); the values of
// every program value and the gradients of every input must agree to 1e-12 with the same
// finiteness, and the gradients must match central differences in double precision. A failure
// prints the decoded program and its bytes; tests/fuzz/fuzz_tape.cpp (libFuzzer) reads the same
// encoding, and `reproduce` below runs one program given as hex.
//
// Environment (optional): DUALCAST_TAPE_FUZZ_PROGRAMS=n runs n programs instead of 10000;
// DUALCAST_TAPE_FUZZ_SEED=s another seed; DUALCAST_TAPE_FUZZ_WILD=1 adds wild programs (values
// and gradients may be inf or NaN): they agree too, except where a NaN partial meets paths that
// cancel (x - x: reverse mode cancels the cotangents first, forward mode in a fused kernel gets
// NaN - NaN; about 1 program in 2 x 10^4, see docs/semantics.md).
#include <doctest/doctest.h>

#include "fuzz/tape_programs.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

long env_long(char const *name, long fallback) {
  char const *v = std::getenv(name); // NOLINT(concurrency-mt-unsafe): read before any thread
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

// n random byte strings of 64 to 255 bytes from seed, each checked; stops after 3 failures.
tape_fuzz::stats run_batch(long n, unsigned seed, bool wild) {
  std::mt19937 g(seed);
  tape_fuzz::stats st;
  int failures = 0;
  for (long i = 0; i < n && failures < 3; ++i) {
    std::vector<std::uint8_t> bytes(64 + g() % 192);
    for (auto &b : bytes)
      b = std::uint8_t(g() & 0xffu);
    std::string m = tape_fuzz::check(bytes.data(), bytes.size(), &st, wild);
    if (!m.empty()) {
      ++failures;
      FAIL_CHECK("program " << i << " of seed " << seed << ":\n" << m);
    }
  }
  return st;
}

} // namespace

TEST_CASE("tape fuzz: 10^4 random programs agree fused, lazy and unfused, and with central "
          "differences") {
  long const n = env_long("DUALCAST_TAPE_FUZZ_PROGRAMS", 10000);
  auto const seed = unsigned(env_long("DUALCAST_TAPE_FUZZ_SEED", 20261122));
  bool const wild = env_long("DUALCAST_TAPE_FUZZ_WILD", 0) != 0;
  auto t0 = std::chrono::steady_clock::now();
  tape_fuzz::stats st = run_batch(n, seed, wild);
  double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE(st.programs << " programs in " << s << " s; central differences checked on "
                      << st.fd_checked << ", skipped on " << st.fd_skipped
                      << " (a kink crossed); largest error / tolerance: values " << st.worst_value
                      << ", gradients " << st.worst_grad << ", central differences "
                      << st.worst_fd);
  CHECK(st.programs == n);
  // The checks did run: central differences on most programs; every instruction and every
  // operation of the encoding occurred.
  CHECK(st.fd_checked * 10 >= n * 8);
  if (n < 10000)
    return;
  for (int c = 0; c < tape_fuzz::o_count; ++c) {
    INFO("instruction " << tape_fuzz::infos[c].text);
    CHECK(st.instructions[std::size_t(c)] > 0);
  }
  for (int k = 0; k < tape_fuzz::n_kinds; ++k) {
    INFO("operation " << tape_fuzz::kind_name(tape_fuzz::kind(k)));
    CHECK(st.operations[std::size_t(k)] > 0);
  }
}

TEST_CASE("tape fuzz: any byte string decodes into a program that passes") {
  std::vector<std::vector<std::uint8_t>> inputs = {
      {}, {0}, std::vector<std::uint8_t>(300, 0xff), std::vector<std::uint8_t>(64, 0x80)};
  for (auto const &b : inputs) {
    tape_fuzz::program p = tape_fuzz::decode(b.data(), b.size());
    CHECK(!p.steps.empty());
    CHECK(p.dims.size() ==
          p.inputs.size() + p.steps.size() +
              std::size_t(std::count_if(p.steps.begin(), p.steps.end(),
                                        [](auto const &x) { return x.n_out == 2; })));
    CHECK(tape_fuzz::check(p) == "");
    // the description names the bytes, which decode into the same program
    std::string d = tape_fuzz::describe(p);
    CHECK(d.find("bytes (hex): " + tape_fuzz::hex(b)) != std::string::npos);
    auto again = tape_fuzz::from_hex(tape_fuzz::hex(b));
    CHECK(tape_fuzz::describe(tape_fuzz::decode(again.data(), again.size())) == d);
  }
}

// Runs one program given as hex (the "bytes (hex)" line of a failure); skipped unless asked for:
//   DUALCAST_TAPE_FUZZ_HEX=... ./error_tests -tc='*reproduce*' --no-skip
TEST_CASE("tape fuzz: reproduce one program" * doctest::skip()) {
  char const *hex = std::getenv("DUALCAST_TAPE_FUZZ_HEX"); // NOLINT(concurrency-mt-unsafe)
  REQUIRE(hex != nullptr);
  auto b = tape_fuzz::from_hex(hex);
  tape_fuzz::program p =
      tape_fuzz::decode(b.data(), b.size(), env_long("DUALCAST_TAPE_FUZZ_WILD", 0) != 0);
  MESSAGE(tape_fuzz::describe(p));
  CHECK(tape_fuzz::check(p) == "");
}
