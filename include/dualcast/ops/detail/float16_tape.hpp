// dualcast/ops/detail/float16_tape.hpp: tape operations over bfloat16 / half variables, computed
// in float.
//
// Every tape operation that takes 16-bit operands has a node of its own that reads the 16 bits
// (the fused node under either policy, matmul of any rank, sum, mean, the softmax family):
// arithmetic, the reductions' accumulation and the gemm in float, each result rounded once, every
// gradient inside the operation float; the gradient of a 16-bit variable is stored in its own
// precision (each addition done in float, rounded once), as PyTorch stores a bfloat16 tensor's.
// Float master weights (cast to 16 bits on the tape) keep float gradients: docs/mixed-precision.md.
// Here: which operands are 16-bit, and the refusal of the operations that take none.
#pragma once

#include <dualcast/arrays/stored_view.hpp>
#include <dualcast/ops/cast.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <array>
#include <cstddef>
#include <type_traits>

namespace dualcast::detail {

// Whether operand X (a variable, lazy expression or tensor) holds bfloat16 / half.
template <class X> constexpr bool float16_operand() {
  using D = std::remove_cvref_t<X>;
  if constexpr (is_tensor_v<D>)
    return is_float16_v<typename D::value_type>;
  else if constexpr (var_like<D>)
    return is_float16_v<typename var_of_t<D>::value_type>;
  else
    return false;
}
template <class... A> inline constexpr bool any_float16_operand_v = (float16_operand<A>() || ...);

} // namespace dualcast::detail

// The refusal of a tape operation that does not take bfloat16 / half operands, naming it (OP: a
// string literal, "max"; then the operands' types: variables, lazy expressions or tensors).
// Written at the top of the public call, so the message names the call the user wrote;
// custom_op's own refusal (tape/custom_op.hpp) still stops a user's operation.
#define DUALCAST_REFUSE_FLOAT16(OP, ...)                                                           \
  static_assert(!::dualcast::detail::any_float16_operand_v<__VA_ARGS__>,                           \
                "dualcast::" OP                                                                    \
                ": does not take bfloat16 / half variables (docs/mixed-precision.md "              \
                "lists the tape operations that do); cast the operand to float first: "            \
                "dualcast::cast<float>(x)")

namespace dualcast::detail {

// The first 16-bit type among element types E (void: none).
template <class... E> struct float16_elem_of_args { using type = void; };
template <class E, class... R> struct float16_elem_of_args<E, R...> {
  using type = std::conditional_t<is_float16_v<E>, E, typename float16_elem_of_args<R...>::type>;
};

} // namespace dualcast::detail
