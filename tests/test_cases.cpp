// The backend-independent test bodies of tests/cases/, run on the CPU backend.
#include "cases/lstm_case.hpp"

#include <doctest/doctest.h>

namespace dc = dualcast;
using namespace dualcast_tests;

TEST_CASE("lstm case on the CPU backend: values, partials and VJP with a broadcast input") {
  for (int threads : {1, 2}) {
    host_memory_of<float> mf;
    CHECK(check_lstm_case<float>(dc::cpu{threads}, mf, 67, 129) == "");
    host_memory_of<double> md;
    CHECK(check_lstm_case<double>(dc::cpu{threads}, md, 300, 131) == "");
  }
}
