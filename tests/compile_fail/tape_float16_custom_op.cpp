// must-not-compile: a user's custom_op over bfloat16 variables stops at custom_op's own refusal
// (issue 37: custom_op computes in its element type, which is float or double).
// expect: dualcast::custom_op: this tape operation does not take bfloat16 / half variables
#include <dualcast/autodiff.hpp>

int main() {
  namespace dc = dualcast;
  dc::tape tp;
  auto x = tp.variable(dc::tensor<dc::bfloat16>::zeros({4}));
  auto y = dc::custom_op(
      "twice", [](auto const &, auto &, auto const &v) { return v; },
      [](auto const &, auto &, auto const &, auto &) {}, x);
  (void)y;
}
