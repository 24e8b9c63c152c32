// must-not-compile: writing through tensor::data(), which the tape could not see (data() is
// read-only; mutable_data() bumps the version, element access too).
// expect: read-only
#include <dualcast/autodiff.hpp>

int main() {
  auto w = dualcast::tensor<double>::zeros({2, 2});
  w.data()[0] = 10.0;
}
