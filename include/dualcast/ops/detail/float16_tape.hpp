// dualcast/ops/detail/float16_tape.hpp: tape operations over bfloat16 / half variables, computed
// in float.
//
// A 16-bit operation without a node of its own (batched and 1-D matmul, fused nodes under
// policy::store; the fused node, 2-D matmul, sum, mean and the softmax family read the 16 bits
// themselves) widens its 16-bit operands to float with cast nodes (ops/cast.hpp), runs the float
// operation, and rounds each result back with one more cast node. So the arithmetic, the
// reductions' accumulation and the gemm are float, each result is rounded once, and every
// gradient inside the operation is float; the gradient of a 16-bit variable is stored in its own
// precision (each addition done in float, rounded once), as PyTorch stores a bfloat16 tensor's.
// Float master weights (cast to 16 bits on the tape) keep float gradients: docs/mixed-precision.md.
// The float copies are temporaries of the operation, but a float node that saves its inputs
// (a batched matmul) keeps their float copies until backward.
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

// A fused node's argument in float: 16-bit variables through a cast node, 16-bit tensors
// converted (constants), anything else as it is.
template <class A> decltype(auto) widened(A const &a) {
  if constexpr (!float16_operand<A>())
    return (a);
  else if constexpr (is_tensor_v<A>)
    return converted<float>(a, ambient_cpu());
  else
    return cast<float>(a);
}

// The first 16-bit type among element types E (void: none).
template <class... E> struct float16_elem_of_args { using type = void; };
template <class E, class... R> struct float16_elem_of_args<E, R...> {
  using type = std::conditional_t<is_float16_v<E>, E, typename float16_elem_of_args<R...>::type>;
};

// The float operation's result(s) rounded to T16 (a cast node each).
template <class T16> var<T16> narrowed(var<float> const &r) { return cast<T16>(r); }
template <class T16, std::size_t K>
std::array<var<T16>, K> narrowed(std::array<var<float>, K> const &r) {
  std::array<var<T16>, K> o;
  for (std::size_t k = 0; k < K; ++k)
    o[k] = cast<T16>(r[k]);
  return o;
}

// The element type of a 16-bit operand.
template <class X> using float16_elem_t = typename var_of_t<std::remove_cvref_t<X>>::value_type;

} // namespace dualcast::detail
