// tests/fuzz/tape_programs.hpp: random tape programs for the differential tape fuzzer
// (tests/test_tape_fuzz.cpp runs a fixed-seed batch of them; tests/fuzz/fuzz_tape.cpp is the
// libFuzzer target over the same encoding).
//
// decode() turns any byte string into a valid program: 1 to 3 input variables of
// broadcast-compatible shapes (rank 0..3, extents 0..5, at most 24 elements; some of them
// transposed or strided views), then up to 8 steps, each an elementwise group or one
// non-elementwise tape operation (sum, mean, max, min over axes, softmax, log_softmax,
// logsumexp, matmul, reshape, transpose, permute, slice, stack, concat, broadcast_to,
// index_select, gather), ending in the loss sum(y * W) over the last value y with a fixed random
// W. An elementwise group is a register program (bytecode) over up to 3 values and a constant
// tensor: every dualcast math function and operator, scalar operands, fma, where, a
// data-dependent branch, and two "template" instructions made of several plain operators. One
// kernel runs any bytecode (interp: it dispatches at run time), so the fuzzer instantiates one
// elementwise kernel for all of them. Value ranges are tracked by interval arithmetic while
// decoding, so that every value stays finite: logarithms, roots and powers get operands made
// positive, divisions denominators away from 0, exponentials bounded operands.
//
// run() executes a program in one of three formulations:
//   fused    every group is ONE dualcast::fused node (the whole bytecode in one kernel; the tape's
//            default policy, chosen per program, makes it a store or a recompute node);
//   lazy     every template instruction is a lazy expression of plain operators, materialised as
//            ONE fused node; the runs of other instructions between them are fused nodes of
//            their own (a finer fusion than `fused`);
//   unfused  the tape in unfused mode (tape::fused = false): one node per instruction, the
//            template instructions evaluated node by node by dualcast's unfused mode.
// check() runs all three and requires
//   - the values of every program value to agree to 1e-12 (relative to the element, or to 1e-3 of
//     the largest element of the value: cancellation) and the gradients of every input too (plus
//     1e-10 of the loss's scale: a gradient that is 0 by symmetry comes out as rounding noise),
//     with exactly the same finiteness pattern;
//   - the gradients to match central differences in double precision along two random
//     directions (steps 1e-6, 2e-6 and 4e-6; tolerance 1e-6 relative plus the differences between
//     the three and a bound on rounding), unless an operand of a non-differentiable operation
//     (relu, abs, min / max, floor, round, clamp, where, a branch, a max / min reduction) is on
//     another side of its kink at x +- 4e-6 v than at x (the unfused formulation, which has every
//     operand as a value, records the sides);
// and returns a description of the first mismatch followed by the decoded program, or "".
//
// Wild programs (decode(..., wild = true): one in 6) also take operands outside the domains and
// ranges above, so values and gradients may be inf or NaN; they skip central differences. They
// fail today: a fused kernel gives NaN gradients where unfused mode gives 0 (see "known" in
// tests/test_regressions.cpp), so they are off unless asked for.
#pragma once

#include <dualcast/autodiff.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace tape_fuzz {

namespace dc = dualcast;
using dc::index_t;
using dc::shape;
using tensor = dc::tensor<double>;
using var = dc::var<double>;

inline constexpr int n_regs = 8;        // r0..r7; r8 receives unused kernel arguments
inline constexpr int max_instr = 12;    // instructions of one group
inline constexpr index_t max_size = 32; // elements of any value
inline constexpr double cap = 1e6;      // bound on |every value| (interval arithmetic)
inline constexpr double scalars[8] = {0.5, 2.0, -1.5, 3.0, 0.25, 0.9, 1.0, -0.75};
inline constexpr int powers[4] = {2, 3, -1, 0};

// ---- the elementwise instructions --------------------------------------------------------------
// clang-format off
enum eop : std::uint8_t {
  o_neg, o_exp, o_log, o_sqrt, o_tanh, o_sigmoid, o_sin, o_cos, o_atan, o_relu, o_abs,
  o_softplus, o_sqr, o_erf, o_erfc, o_expm1, o_log1p, o_asinh, o_sinh, o_cosh, o_cbrt, o_tan,
  o_asin, o_acos, o_atanh, o_acosh, o_exp2, o_log2, o_log10, o_floor, o_ceil, o_round,
  o_add, o_sub, o_mul, o_div, o_pow, o_min, o_max, o_atan2, o_hypot,
  o_adds, o_muls, o_rsubs, o_rdivs, o_pows, o_spow, o_pown, o_maxs, o_mins, o_clamps,
  o_addk, o_mulk,
  o_fma, o_where, o_branch,
  o_t_cell, o_t_mix, // templates: plain lazy operators in the lazy and unfused formulations
  o_count
};
// clang-format on

// How an instruction prints ($a, $b, $c: registers, $s: the scalar, $n: the integer power),
// which registers it reads (bits 1, 2, 4 for a, b, c) and whether it reads the constant K.
struct eop_info {
  char const *text;
  std::uint8_t reads;
  bool k;
};
inline constexpr eop_info infos[o_count] = {
    {"-$a", 1, false},
    {"exp($a)", 1, false},
    {"log($a)", 1, false},
    {"sqrt($a)", 1, false},
    {"tanh($a)", 1, false},
    {"sigmoid($a)", 1, false},
    {"sin($a)", 1, false},
    {"cos($a)", 1, false},
    {"atan($a)", 1, false},
    {"relu($a)", 1, false},
    {"abs($a)", 1, false},
    {"softplus($a)", 1, false},
    {"$a * $a", 1, false},
    {"erf($a)", 1, false},
    {"erfc($a)", 1, false},
    {"expm1($a)", 1, false},
    {"log1p($a)", 1, false},
    {"asinh($a)", 1, false},
    {"sinh($a)", 1, false},
    {"cosh($a)", 1, false},
    {"cbrt($a)", 1, false},
    {"tan($a)", 1, false},
    {"asin($a)", 1, false},
    {"acos($a)", 1, false},
    {"atanh($a)", 1, false},
    {"acosh($a)", 1, false},
    {"exp2($a)", 1, false},
    {"log2($a)", 1, false},
    {"log10($a)", 1, false},
    {"floor($a)", 1, false},
    {"ceil($a)", 1, false},
    {"round($a)", 1, false},
    {"$a + $b", 3, false},
    {"$a - $b", 3, false},
    {"$a * $b", 3, false},
    {"$a / $b", 3, false},
    {"pow($a, $b)", 3, false},
    {"min($a, $b)", 3, false},
    {"max($a, $b)", 3, false},
    {"atan2($a, $b)", 3, false},
    {"hypot($a, $b)", 3, false},
    {"$a + $s", 1, false},
    {"$a * $s", 1, false},
    {"$s - $a", 1, false},
    {"$s / $a", 1, false},
    {"pow($a, $s)", 1, false},
    {"pow(|$s|, $a)", 1, false},
    {"pow($a, $n)", 1, false},
    {"max($a, $s)", 1, false},
    {"min($a, $s)", 1, false},
    {"clamp($a, -|$s|, |$s|)", 1, false},
    {"$a + K", 1, true},
    {"$a * K", 1, true},
    {"fma($a, $b, $c)", 7, false},
    {"where($a > 0, $b, $c)", 7, false},
    {"if ($a > 0) tanh($b) * $c else $b - $c", 7, false},
    {"sigmoid($b) * $c + sigmoid($a) * tanh($c)   [template]", 7, false},
    {"log($a * $a + 0.5) * K - exp(-$b) + $a / ($c * $c + 0.5)   [template]", 7, true},
};
inline bool is_template(int code) { return code == o_t_cell || code == o_t_mix; }

struct instr {
  std::uint8_t code = 0, dst = 0, a = 0, b = 0, c = 0, imm = 0;
};
// A register program: arguments 0..2 are loaded into registers in[0..2], the instructions run in
// order, registers out[0] and out[1] are the two outputs.
struct bytecode {
  std::uint8_t n = 0;
  std::array<std::uint8_t, 3> in{0, 1, 2};
  std::array<std::uint8_t, 2> out{0, 0};
  std::array<instr, max_instr> ins{};
};

// One instruction on registers of type R (double, a SIMD batch, a dual of either); k is the
// constant tensor's element.
template <class R, class K> R exec(instr const &i, R const *r, K const &k) {
  R const &a = r[i.a];
  R const &b = r[i.b];
  R const &c = r[i.c];
  double const s = scalars[i.imm % 8];
  switch (i.code) {
  case o_neg:
    return -a;
  case o_exp:
    return dc::exp(a);
  case o_log:
    return dc::log(a);
  case o_sqrt:
    return dc::sqrt(a);
  case o_tanh:
    return dc::tanh(a);
  case o_sigmoid:
    return dc::sigmoid(a);
  case o_sin:
    return dc::sin(a);
  case o_cos:
    return dc::cos(a);
  case o_atan:
    return dc::atan(a);
  case o_relu:
    return dc::relu(a);
  case o_abs:
    return dc::abs(a);
  case o_softplus:
    return dc::softplus(a);
  case o_sqr:
    return a * a;
  case o_erf:
    return dc::erf(a);
  case o_erfc:
    return dc::erfc(a);
  case o_expm1:
    return dc::expm1(a);
  case o_log1p:
    return dc::log1p(a);
  case o_asinh:
    return dc::asinh(a);
  case o_sinh:
    return dc::sinh(a);
  case o_cosh:
    return dc::cosh(a);
  case o_cbrt:
    return dc::cbrt(a);
  case o_tan:
    return dc::tan(a);
  case o_asin:
    return dc::asin(a);
  case o_acos:
    return dc::acos(a);
  case o_atanh:
    return dc::atanh(a);
  case o_acosh:
    return dc::acosh(a);
  case o_exp2:
    return dc::exp2(a);
  case o_log2:
    return dc::log2(a);
  case o_log10:
    return dc::log10(a);
  case o_floor:
    return dc::floor(a);
  case o_ceil:
    return dc::ceil(a);
  case o_round:
    return dc::round(a);
  case o_add:
    return a + b;
  case o_sub:
    return a - b;
  case o_mul:
    return a * b;
  case o_div:
    return a / b;
  case o_pow:
    return dc::pow(a, b);
  case o_min:
    return dc::min(a, b);
  case o_max:
    return dc::max(a, b);
  case o_atan2:
    return dc::atan2(a, b);
  case o_hypot:
    return dc::hypot(a, b);
  case o_adds:
    return a + s;
  case o_muls:
    return a * s;
  case o_rsubs:
    return s - a;
  case o_rdivs:
    return s / a;
  case o_pows:
    return dc::pow(a, s);
  case o_spow:
    return dc::pow(std::fabs(s), a);
  case o_pown:
    return dc::pow(a, powers[i.imm % 4]);
  case o_maxs:
    return dc::max(a, s);
  case o_mins:
    return dc::min(a, s);
  case o_clamps:
    return dc::clamp(a, -std::fabs(s), std::fabs(s));
  case o_addk:
    return a + k;
  case o_mulk:
    return a * k;
  case o_fma:
    return dc::fma(a, b, c);
  case o_where:
    return dc::where(a > 0.0, b, c);
  case o_branch:
    if (a > 0.0) // a lane mask on SIMD batches: the batch splits where its lanes disagree
      return dc::tanh(b) * c;
    return b - c;
  case o_t_cell:
    return dc::sigmoid(b) * c + dc::sigmoid(a) * dc::tanh(c);
  case o_t_mix:
    return dc::log(a * a + 0.5) * k - dc::exp(-b) + a / (c * c + 0.5);
  default:
    return a;
  }
}

// The kernel functor: runs a bytecode (the same one on every element).
struct interp {
  bytecode bc;
  template <class A, class B, class C, class K>
  auto operator()(A const &a, B const &b, C const &c, K const &k) const {
    using R = std::decay_t<decltype(a + b + c)>;
    R r[n_regs + 1];
    for (auto &x : r)
      x = R(a);
    r[bc.in[0]] = R(a);
    r[bc.in[1]] = R(b);
    r[bc.in[2]] = R(c);
    for (int i = 0; i < bc.n; ++i)
      r[bc.ins[std::size_t(i)].dst] = exec(bc.ins[std::size_t(i)], r, k);
    return dc::outputs(r[bc.out[0]], r[bc.out[1]]);
  }
};

// The template instructions with dualcast's lazy operators: ONE fused node on a fused tape,
// node by node on a tape in unfused mode; and mean (a lazy product with 1 / n). They instantiate
// most of the lazy and unfused kernels, so the libFuzzer build compiles them in a translation unit
// of their own, in parallel with the rest and without optimisation (TAPE_FUZZ_SPLIT everywhere,
// plus TAPE_FUZZ_LAZY_TU in the one that defines them: tests/fuzz/fuzz_tape_lazy.cpp).
#if defined(TAPE_FUZZ_SPLIT) && !defined(TAPE_FUZZ_LAZY_TU)
var template_node(int code, var const &a, var const &b, var const &c, tensor const &k);
var mean_node(var const &x, std::vector<int> const &axes, bool keepdims);
#else
#if defined(TAPE_FUZZ_SPLIT)
#define TAPE_FUZZ_LAZY_LINKAGE
#else
#define TAPE_FUZZ_LAZY_LINKAGE inline
#endif
TAPE_FUZZ_LAZY_LINKAGE var template_node(int code, var const &a, var const &b, var const &c,
                                         tensor const &k) {
  if (code == o_t_cell)
    return dc::sigmoid(b) * c + dc::sigmoid(a) * dc::tanh(c);
  return dc::log(a * a + 0.5) * k - dc::exp(-b) + a / (c * c + 0.5);
}
TAPE_FUZZ_LAZY_LINKAGE var mean_node(var const &x, std::vector<int> const &axes, bool keepdims) {
  return dc::mean(x, axes, keepdims);
}
#undef TAPE_FUZZ_LAZY_LINKAGE
#endif

// ---- value ranges ------------------------------------------------------------------------------
struct interval {
  double lo = 0, hi = 0;
};
inline double mag(interval i) { return std::max(std::fabs(i.lo), std::fabs(i.hi)); }
inline interval hull(interval a, interval b) {
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}
inline bool away_from_zero(interval i) { return i.lo >= 0.1 || i.hi <= -0.1; }
template <class F> interval corners(F f, interval a, interval b) {
  double v[4] = {f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)};
  return {*std::min_element(v, v + 4), *std::max_element(v, v + 4)};
}
inline interval mul_iv(interval a, interval b) {
  return corners([](double x, double y) { return x * y; }, a, b);
}
inline interval square_iv(interval a) {
  double m = mag(a);
  double lo = a.lo > 0 ? a.lo * a.lo : (a.hi < 0 ? a.hi * a.hi : 0.0);
  return {lo, m * m};
}

// The range of an instruction's result, or false where its operands leave the domain in which
// the program is known to stay finite and smooth enough for finite differences.
inline bool transfer(instr const &in, interval a, interval b, interval c, interval k, interval &r) {
  double const s = scalars[in.imm % 8];
  auto mono = [&](double (*f)(double)) { r = {f(a.lo), f(a.hi)}; };
  switch (in.code) {
  case o_neg:
    r = {-a.hi, -a.lo};
    break;
  case o_exp:
    if (a.hi > 10)
      return false;
    mono(std::exp);
    break;
  case o_log:
  case o_log2:
  case o_log10:
  case o_sqrt:
    if (a.lo < 0.1)
      return false;
    mono(in.code == o_log     ? static_cast<double (*)(double)>(std::log)
         : in.code == o_log2  ? static_cast<double (*)(double)>(std::log2)
         : in.code == o_log10 ? static_cast<double (*)(double)>(std::log10)
                              : static_cast<double (*)(double)>(std::sqrt));
    break;
  case o_tanh:
    mono(std::tanh);
    break;
  case o_sigmoid:
    r = {1 / (1 + std::exp(-a.lo)), 1 / (1 + std::exp(-a.hi))};
    break;
  case o_sin:
  case o_cos:
    r = {-1, 1};
    break;
  case o_atan:
    mono(std::atan);
    break;
  case o_relu:
    r = {std::max(a.lo, 0.0), std::max(a.hi, 0.0)};
    break;
  case o_abs:
    r = {a.lo > 0 ? a.lo : (a.hi < 0 ? -a.hi : 0.0), mag(a)};
    break;
  case o_softplus:
    r = {std::log1p(std::exp(std::min(a.lo, 30.0))), std::max(a.hi, 0.0) + 1};
    break;
  case o_sqr:
  case o_pown:
    if (in.code == o_pown && powers[in.imm % 4] != 2) {
      int n = powers[in.imm % 4];
      if (n == 0)
        r = {1, 1};
      else if (n == 3)
        r = {a.lo * a.lo * a.lo, a.hi * a.hi * a.hi};
      else if (!away_from_zero(a))
        return false;
      else
        r = {1 / a.hi, 1 / a.lo};
      break;
    }
    r = square_iv(a);
    break;
  case o_erf:
    mono(std::erf);
    break;
  case o_erfc:
    r = {std::erfc(a.hi), std::erfc(a.lo)};
    break;
  case o_expm1:
    if (a.hi > 10)
      return false;
    mono(std::expm1);
    break;
  case o_log1p:
    if (a.lo < -0.9)
      return false;
    mono(std::log1p);
    break;
  case o_asinh:
    mono(std::asinh);
    break;
  case o_sinh:
  case o_cosh:
    if (mag(a) > 10)
      return false;
    if (in.code == o_sinh)
      mono(std::sinh);
    else
      r = {a.lo > 0 ? std::cosh(a.lo) : (a.hi < 0 ? std::cosh(a.hi) : 1.0), std::cosh(mag(a))};
    break;
  case o_cbrt:
    if (!away_from_zero(a))
      return false;
    mono(std::cbrt);
    break;
  case o_tan:
    if (mag(a) > 1.2)
      return false;
    mono(std::tan);
    break;
  case o_asin:
  case o_atanh:
    if (mag(a) > 0.9)
      return false;
    mono(in.code == o_asin ? static_cast<double (*)(double)>(std::asin)
                           : static_cast<double (*)(double)>(std::atanh));
    break;
  case o_acos:
    if (mag(a) > 0.9)
      return false;
    r = {std::acos(a.hi), std::acos(a.lo)};
    break;
  case o_acosh:
    if (a.lo < 1.1)
      return false;
    mono(std::acosh);
    break;
  case o_exp2:
    if (a.hi > 14)
      return false;
    mono(std::exp2);
    break;
  case o_floor:
  case o_ceil:
  case o_round:
    r = {std::floor(a.lo), std::ceil(a.hi)};
    break;
  case o_add:
    r = {a.lo + b.lo, a.hi + b.hi};
    break;
  case o_sub:
    r = {a.lo - b.hi, a.hi - b.lo};
    break;
  case o_mul:
    r = mul_iv(a, b);
    break;
  case o_div:
    if (!away_from_zero(b))
      return false;
    r = corners([](double x, double y) { return x / y; }, a, b);
    break;
  case o_pow:
    if (a.lo < 0.1 || mag(b) > 4)
      return false;
    r = corners([](double x, double y) { return std::pow(x, y); }, a, b);
    break;
  case o_min:
    r = {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
    break;
  case o_max:
    r = {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
    break;
  case o_atan2:
  case o_hypot:
    if (!away_from_zero(a) && !away_from_zero(b))
      return false;
    r = in.code == o_atan2 ? interval{-4, 4} : interval{0, std::hypot(mag(a), mag(b))};
    break;
  case o_adds:
    r = {a.lo + s, a.hi + s};
    break;
  case o_muls:
    r = mul_iv(a, {s, s});
    break;
  case o_rsubs:
    r = {s - a.hi, s - a.lo};
    break;
  case o_rdivs:
    if (!away_from_zero(a))
      return false;
    r = mul_iv({s, s}, {1 / a.hi, 1 / a.lo});
    break;
  case o_pows:
    if (a.lo < 0.1)
      return false;
    r = corners([](double x, double y) { return std::pow(x, y); }, a, {s, s});
    break;
  case o_spow:
    if (mag(a) * std::fabs(std::log(std::fabs(s))) > 10)
      return false;
    r = corners([](double x, double y) { return std::pow(x, y); }, {std::fabs(s), std::fabs(s)}, a);
    break;
  case o_maxs:
    r = {std::max(a.lo, s), std::max(a.hi, s)};
    break;
  case o_mins:
    r = {std::min(a.lo, s), std::min(a.hi, s)};
    break;
  case o_clamps: {
    double t = std::fabs(s);
    r = {std::clamp(a.lo, -t, t), std::clamp(a.hi, -t, t)};
    break;
  }
  case o_addk:
    r = {a.lo + k.lo, a.hi + k.hi};
    break;
  case o_mulk:
    r = mul_iv(a, k);
    break;
  case o_fma: {
    interval p = mul_iv(a, b);
    r = {p.lo + c.lo, p.hi + c.hi};
    break;
  }
  case o_where:
    r = hull(b, c);
    break;
  case o_branch:
    r = hull({-mag(c), mag(c)}, {b.lo - c.hi, b.hi - c.lo});
    break;
  case o_t_cell:
    r = {-mag(c) - 1, mag(c) + 1};
    break;
  case o_t_mix: {
    if (b.lo < -10)
      return false;
    double l = std::max(std::fabs(std::log(0.5)), std::log(mag(a) * mag(a) + 0.5)) * mag(k);
    r = {-l - std::exp(-b.lo) - 2 * mag(a), l + 2 * mag(a)};
    break;
  }
  default:
    return false;
  }
  return std::isfinite(r.lo) && std::isfinite(r.hi) && mag(r) <= cap;
}

// ---- programs ----------------------------------------------------------------------------------
// clang-format off
enum class kind : std::uint8_t {
  group, sum, mean, max, min, softmax, log_softmax, logsumexp, matmul, reshape, transpose,
  permute, slice, stack, concat, broadcast_to, index_select, gather
};
// clang-format on
inline char const *kind_name(kind k) {
  static char const *const names[] = {
      "group",       "sum",       "mean",   "max",          "min",          "softmax",
      "log_softmax", "logsumexp", "matmul", "reshape",      "transpose",    "permute",
      "slice",       "stack",     "concat", "broadcast_to", "index_select", "gather"};
  return names[int(k)];
}

struct step {
  kind op = kind::group;
  std::vector<int> args; // operand values (a group's: -1 for a padding argument)
  int n_out = 1;         // values produced (a group: 1 or 2)
  // group
  bytecode bc;
  int k = -1; // the constant tensor (index into program::consts)
  shape gs;   // the group's shape
  // reductions, softmax family, shape operations, indexing
  std::vector<int> axes;
  bool keepdims = false;
  int axis = 0, axis2 = 0;
  index_t begin = 0, end = 0, stride = 1;
  shape target;
  std::vector<int> perm;
  std::vector<index_t> indices;
  dc::index_array index;
  // matmul: mode 0 a @ a^T, 1 a^T @ a, 2 a @ C, 3 C @ a, 4 a @ args[1]
  int mm = 0;
  int mconst = -1;
};

struct input_def {
  int view = 0; // 0 contiguous, 1 transposed (d0, d1), 2 every other element along d0
  int d0 = 0, d1 = 0;
};

struct program {
  std::uint32_t seed = 0;
  dc::policy_kind policy = dc::policy_kind::automatic;
  bool special = false; // inputs with zeros, +-1 and repeated elements (kinks and ties)
  // Operands outside the domains and ranges above too: inf and NaN values and gradients (which
  // must then be non-finite in every formulation alike); no finite differences.
  bool wild = false;
  std::vector<input_def> input_views;
  std::vector<tensor> inputs; // the input values (views where input_views says so)
  std::vector<tensor> consts; // constant tensors (group constants, matmul operands, W)
  std::vector<step> steps;
  std::vector<shape> dims; // of every value: the inputs, then each step's results
  std::vector<interval> range;
  int weight = -1; // W
  std::vector<std::uint8_t> bytes;
};

// Reads the encoding; bytes past the end read as 0.
class reader {
public:
  reader(std::uint8_t const *p, std::size_t n) : p_(p), n_(n) {}
  unsigned byte() {
    if (n_ == 0)
      return 0;
    --n_;
    return *p_++;
  }
  int below(index_t n) { return n <= 1 ? 0 : int(index_t(byte()) % n); }
  bool chance(int num, int den) { return below(den) < num; }

private:
  std::uint8_t const *p_;
  std::size_t n_;
};

namespace detail {

inline shape make_shape(std::vector<index_t> const &e) {
  shape s;
  s.rank = int(e.size());
  for (std::size_t i = 0; i < e.size(); ++i)
    s.ext[i] = e[i];
  return s;
}

inline tensor random_tensor(shape const &s, std::mt19937_64 &rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(std::size_t(s.size()));
  for (auto &x : v)
    x = u(rng);
  return tensor::from(s, v);
}

struct decoder {
  reader r;
  program &p;
  std::mt19937_64 rng;
  bool allow_wild;

  int add_const(tensor t) {
    p.consts.push_back(std::move(t));
    return int(p.consts.size()) - 1;
  }
  void add_value(shape const &s, interval iv) {
    p.dims.push_back(s);
    p.range.push_back(iv);
  }
  // A value, most often one of the latest.
  int pick_value() {
    int n = int(p.dims.size());
    if (r.chance(1, 4))
      return r.below(n);
    return n - 1 - r.below(std::min(n, 2));
  }

  void inputs() {
    shape base;
    base.rank = r.below(4);
    bool empty = r.chance(1, 12);
    static constexpr index_t choice[8] = {1, 2, 3, 4, 2, 3, 1, 5};
    for (int d = 0; d < base.rank; ++d)
      base.ext[d] = empty && r.chance(1, 3) ? 0 : choice[r.below(8)];
    while (base.size() > 24) {
      int d = int(std::max_element(base.ext, base.ext + base.rank) - base.ext);
      --base.ext[d];
    }
    int n = 1 + r.below(3);
    for (int i = 0; i < n; ++i) {
      shape s;
      s.rank = base.rank - r.below(base.rank + 1);
      for (int d = 0; d < s.rank; ++d) {
        s.ext[d] = base.ext[base.rank - s.rank + d];
        if (r.chance(1, 4))
          s.ext[d] = 1;
      }
      input_def def;
      int v = r.below(4);
      if (v == 2 && s.rank >= 2) {
        def.view = 1;
        def.d0 = r.below(s.rank);
        def.d1 = (def.d0 + 1 + r.below(s.rank - 1)) % s.rank;
      } else if (v == 3 && s.rank >= 1) {
        def.view = 2;
        def.d0 = r.below(s.rank);
      }
      // the values: uniform in [-2, 2]; with `special`, some zeros, +-1 and repeats
      shape bs = s;
      if (def.view == 1)
        std::swap(bs.ext[def.d0], bs.ext[def.d1]);
      if (def.view == 2)
        bs.ext[def.d0] = 2 * s.ext[def.d0] + 1;
      tensor b = random_tensor(bs, rng, -2.0, 2.0);
      if (p.special && b.size() > 0) {
        double *x = b.mutable_data();
        for (index_t j = 0; j < b.size(); ++j) {
          int c = int(rng() % 8);
          if (c == 0)
            x[j] = 0.0;
          else if (c == 1)
            x[j] = (rng() % 2) != 0u ? 1.0 : -1.0;
          else if (c == 2)
            x[j] = x[index_t(rng() % std::uint64_t(b.size()))];
        }
      }
      tensor t = def.view == 1   ? b.transposed(def.d0, def.d1)
                 : def.view == 2 ? b.slice(def.d0, 1, bs.ext[def.d0], 2)
                                 : b;
      p.input_views.push_back(def);
      p.inputs.push_back(t);
      add_value(s, {-2.0, 2.0});
    }
  }

  // ---- groups ----
  struct regs {
    std::array<bool, n_regs + 1> defined{};
    std::array<interval, n_regs + 1> iv{};
    int last = 0;
  };
  int pick_reg(regs const &g) {
    if (r.chance(1, 2) && g.defined[std::size_t(g.last)])
      return g.last;
    int n = 0;
    for (int i = 0; i < n_regs; ++i)
      n += g.defined[std::size_t(i)] ? 1 : 0;
    int j = r.below(n);
    for (int i = 0; i < n_regs; ++i)
      if (g.defined[std::size_t(i)] && j-- == 0)
        return i;
    return 0;
  }
  bool emit(bytecode &bc, regs &g, interval kiv, instr in) {
    interval out;
    if (bc.n >= max_instr)
      return false;
    if (!transfer(in, g.iv[in.a], g.iv[in.b], g.iv[in.c], kiv, out)) {
      if (!p.wild || r.chance(1, 2))
        return false;
      out = {-cap, cap};
    }
    bc.ins[bc.n++] = in;
    g.defined[in.dst] = true;
    g.iv[in.dst] = out;
    g.last = in.dst;
    return true;
  }
  // Writes a guarded copy of register x into register t: kind 0 positive (>= 0.5), 1 in
  // [-0.9, 0.9], 2 in [-3, 3], 3 at least 2. Returns t.
  int guard(bytecode &bc, regs &g, interval kiv, int x, int t, int how) {
    auto e = [&](std::uint8_t code, int a, std::uint8_t imm) {
      return emit(bc, g, kiv, {code, std::uint8_t(t), std::uint8_t(a), 0, 0, imm});
    };
    bool ok = false;
    if (how == 0 || how == 3) {
      std::uint8_t add = how == 3 ? 1 : (r.chance(1, 2) ? 0 : 6); // + 2.0, + 0.5 or + 1.0
      if (mag(g.iv[std::size_t(x)]) <= 100 && r.chance(2, 3))
        ok = e(o_sqr, x, 0) && e(o_adds, t, add);
      else
        ok = e(o_sigmoid, x, 0) && e(o_adds, t, add);
    } else {
      ok = e(o_tanh, x, 0) && e(o_muls, t, how == 1 ? 5 : 3); // * 0.9 or * 3.0
    }
    return ok ? t : -1;
  }
  // Which operand to guard, and how, for an instruction that failed transfer().
  static void guard_for(instr const &in, regs const &g, int &which, int &how) {
    interval a = g.iv[in.a], b = g.iv[in.b];
    which = 0;
    how = 2;
    switch (in.code) {
    case o_log:
    case o_sqrt:
    case o_log2:
    case o_log10:
    case o_pows:
    case o_cbrt:
    case o_rdivs:
    case o_log1p:
    case o_pown:
      how = 0;
      break;
    case o_acosh:
      how = 3;
      break;
    case o_asin:
    case o_acos:
    case o_atanh:
    case o_tan:
      how = 1;
      break;
    case o_div:
    case o_atan2:
    case o_hypot:
      if (!away_from_zero(b) || in.code != o_div)
        which = 1, how = 0;
      break;
    case o_pow:
      if (a.lo < 0.1)
        how = 0;
      else
        which = 1;
      break;
    case o_t_mix:
      which = 1;
      break;
    default:
      if ((infos[in.code].reads & 2) != 0 && mag(b) > mag(a))
        which = 1;
      if ((infos[in.code].reads & 4) != 0 && mag(g.iv[in.c]) > mag(which == 1 ? b : a))
        which = 2;
      break;
    }
  }
  void instruction(bytecode &bc, regs &g, interval kiv) {
    instr in;
    in.code = std::uint8_t(r.below(o_count));
    in.dst = std::uint8_t(r.chance(1, 6) ? r.below(n_regs) : 3 + r.below(n_regs - 3));
    in.a = std::uint8_t(pick_reg(g));
    in.b = std::uint8_t(pick_reg(g));
    in.c = std::uint8_t(pick_reg(g));
    in.imm = std::uint8_t(r.below(8));
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (emit(bc, g, kiv, in))
        return;
      int which = 0, how = 0;
      guard_for(in, g, which, how);
      std::uint8_t *op = which == 0 ? &in.a : which == 1 ? &in.b : &in.c;
      // the guard writes a register the instruction does not read otherwise
      int t = 3;
      while (t < n_regs && (t == in.a || t == in.b || t == in.c) && t != *op)
        ++t;
      if (bc.n + 3 > max_instr || t >= n_regs)
        break;
      int gr = guard(bc, g, kiv, *op, t, how);
      if (gr < 0)
        break;
      *op = std::uint8_t(gr);
    }
    emit(bc, g, kiv, {o_tanh, in.dst, in.a, 0, 0, 0});
  }

  void group(step &st) {
    st.op = kind::group;
    int n_src = 1 + r.below(3);
    st.args.assign(3, -1);
    st.args[0] = pick_value();
    shape gs = p.dims[std::size_t(st.args[0])];
    for (int k = 1; k < n_src; ++k) {
      int cand = r.chance(1, 4) ? st.args[0] : pick_value();
      bool ok = true;
      shape b = dc::broadcast_pair(gs, p.dims[std::size_t(cand)], ok);
      if (ok && b.size() <= max_size && b.rank <= 4) {
        st.args[std::size_t(k)] = cand;
        gs = b;
      }
    }
    st.gs = gs;
    // the constant: broadcasts into the group's shape
    shape ks;
    ks.rank = r.below(gs.rank + 1);
    for (int d = 0; d < ks.rank; ++d)
      ks.ext[d] = r.chance(1, 3) ? 1 : gs.ext[gs.rank - ks.rank + d];
    st.k = add_const(random_tensor(ks, rng, -1.0, 1.0));
    interval kiv{-1, 1};

    regs g;
    for (int k = 0; k < 3; ++k) {
      g.defined[std::size_t(k)] = true;
      int a = st.args[std::size_t(k)];
      g.iv[std::size_t(k)] = a < 0 ? interval{0, 0} : p.range[std::size_t(a)];
    }
    int n = 1 + r.below(6);
    for (int i = 0; i < n && st.bc.n < max_instr; ++i)
      instruction(st.bc, g, kiv);
    if (st.bc.n == 0) // (nothing fit: the last attempt's fallback had no room)
      emit(st.bc, g, kiv, {o_tanh, 3, 0, 0, 0, 0});
    st.n_out = r.chance(1, 3) ? 2 : 1;
    int other = pick_reg(g);
    st.bc.out = {std::uint8_t(st.n_out == 2 ? other : g.last),
                 std::uint8_t(st.n_out == 2 ? g.last : other)};
    for (int j = 0; j < st.n_out; ++j)
      add_value(gs, g.iv[st.bc.out[std::size_t(j)]]);
  }

  // ---- other operations ----
  std::vector<int> axes_of(int rank, std::vector<bool> &mask) {
    mask.assign(std::size_t(rank), false);
    unsigned bits = r.byte();
    std::vector<int> axes;
    for (int d = 0; d < rank; ++d)
      if ((bits >> unsigned(d)) & 1u) {
        mask[std::size_t(d)] = true;
        axes.push_back((bits & 0x80u) != 0u ? d - rank : d);
      }
    if (axes.empty())
      mask.assign(std::size_t(rank), true); // all axes
    return axes;
  }
  static shape reduced(shape const &s, std::vector<bool> const &mask, bool keepdims,
                       index_t &n_red) {
    shape o;
    n_red = 1;
    for (int d = 0; d < s.rank; ++d) {
      if (mask[std::size_t(d)]) {
        n_red *= s.ext[d];
        if (keepdims)
          o.ext[o.rank++] = 1;
      } else {
        o.ext[o.rank++] = s.ext[d];
      }
    }
    return o;
  }
  // Another value of shape s, if one exists (else x itself).
  int same_shape(int x, shape const &s) {
    std::vector<int> c;
    for (int i = 0; i < int(p.dims.size()); ++i)
      if (p.dims[std::size_t(i)] == s)
        c.push_back(i);
    return c.empty() || r.chance(1, 3) ? x : c[std::size_t(r.below(index_t(c.size())))];
  }

  bool other(step &st, kind op) {
    st.op = op;
    int x = pick_value();
    st.args = {x};
    shape const s = p.dims[std::size_t(x)];
    interval const iv = p.range[std::size_t(x)];
    shape o;
    interval oiv = iv;
    switch (op) {
    case kind::sum:
    case kind::mean:
    case kind::max:
    case kind::min: {
      std::vector<bool> mask;
      st.axes = axes_of(s.rank, mask);
      st.keepdims = r.chance(1, 2);
      index_t n_red = 1;
      o = reduced(s, mask, st.keepdims, n_red);
      if (n_red == 0 && o.size() > 0 && op != kind::sum && !(op == kind::mean && p.wild))
        return false; // the mean of nothing is NaN, its max an error
      if (op == kind::sum)
        oiv = {std::min(0.0, double(n_red) * iv.lo), std::max(0.0, double(n_red) * iv.hi)};
      break;
    }
    case kind::softmax:
    case kind::log_softmax:
    case kind::logsumexp: {
      if (s.rank < 1)
        return false;
      int ax = r.below(s.rank);
      st.axis = r.chance(1, 3) ? ax - s.rank : ax;
      index_t n = s.ext[ax];
      o = s;
      if (op == kind::softmax) {
        oiv = {0, 1};
      } else if (op == kind::log_softmax) {
        oiv = {iv.lo - iv.hi - std::log(double(std::max<index_t>(n, 1))), 0};
      } else {
        st.keepdims = r.chance(1, 2);
        if (st.keepdims)
          o.ext[ax] = 1;
        else {
          for (int d = ax; d + 1 < s.rank; ++d)
            o.ext[d] = s.ext[d + 1];
          o.rank -= 1;
        }
        if (n == 0 && o.size() > 0 && !p.wild)
          return false; // -inf
        oiv = {iv.lo, iv.hi + std::log(double(std::max<index_t>(n, 1)))};
      }
      break;
    }
    case kind::matmul: {
      if (s.rank < 2 || s.rank > 3)
        return false;
      st.mm = r.below(5);
      index_t const bt = s.rank == 3 ? s.ext[0] : 1;
      index_t const m = s.ext[s.rank - 2], k = s.ext[s.rank - 1];
      auto with_batch = [&](index_t rows, index_t cols, bool batched) {
        return batched ? shape{bt, rows, cols} : shape{rows, cols};
      };
      if (st.mm == 4) { // another value: (k, n) or (B, k, n)
        std::vector<int> c;
        for (int i = 0; i < int(p.dims.size()); ++i) {
          shape const &t = p.dims[std::size_t(i)];
          if ((t.rank == 2 && t.ext[0] == k) ||
              (t.rank == 3 && t.ext[1] == k && (s.rank == 2 || t.ext[0] == bt)))
            c.push_back(i);
        }
        if (c.empty())
          st.mm = 2;
        else
          st.args.push_back(c[std::size_t(r.below(index_t(c.size())))]);
      }
      double km = 0;
      if (st.mm == 0) {
        o = with_batch(m, m, s.rank == 3);
        km = double(k) * mag(iv) * mag(iv);
      } else if (st.mm == 1) {
        o = with_batch(k, k, s.rank == 3);
        km = double(m) * mag(iv) * mag(iv);
      } else if (st.mm == 2 || st.mm == 3) {
        index_t n = 1 + r.below(3);
        bool cb = s.rank == 3 && r.chance(1, 2);
        shape cs = st.mm == 2 ? with_batch(k, n, cb) : with_batch(n, m, cb);
        st.mconst = add_const(random_tensor(cs, rng, -1.0, 1.0));
        o = st.mm == 2 ? with_batch(m, n, s.rank == 3) : with_batch(n, k, s.rank == 3);
        km = double(st.mm == 2 ? k : m) * mag(iv);
      } else {
        shape const &t = p.dims[std::size_t(st.args[1])];
        index_t b2 = t.rank == 3 ? t.ext[0] : bt;
        bool batched = s.rank == 3 || t.rank == 3;
        o = batched ? shape{b2, m, t.ext[t.rank - 1]} : shape{m, t.ext[1]};
        km = double(k) * mag(iv) * mag(p.range[std::size_t(st.args[1])]);
      }
      oiv = {-km, km};
      break;
    }
    case kind::reshape: {
      index_t n = s.size();
      int rank = r.below(4);
      std::vector<index_t> e;
      if (n == 0) {
        rank = std::max(rank, 1);
        int z = r.below(rank);
        for (int d = 0; d < rank; ++d)
          e.push_back(d == z ? 0 : index_t(r.below(4)));
      } else {
        if (rank == 0 && n != 1)
          rank = 1;
        index_t rem = n;
        for (int d = 0; d + 1 < rank; ++d) {
          std::vector<index_t> div;
          for (index_t f = 1; f <= rem; ++f)
            if (rem % f == 0)
              div.push_back(f);
          index_t f = div[std::size_t(r.below(index_t(div.size())))];
          e.push_back(f);
          rem /= f;
        }
        if (rank > 0)
          e.push_back(rem);
      }
      st.target = make_shape(e);
      o = st.target;
      break;
    }
    case kind::transpose:
      if (s.rank < 2)
        return false;
      st.axis = r.below(s.rank);
      st.axis2 = (st.axis + 1 + r.below(s.rank - 1)) % s.rank;
      o = s;
      std::swap(o.ext[st.axis], o.ext[st.axis2]);
      break;
    case kind::permute: {
      st.perm.resize(std::size_t(s.rank));
      for (int d = 0; d < s.rank; ++d)
        st.perm[std::size_t(d)] = d;
      for (int d = s.rank - 1; d > 0; --d)
        std::swap(st.perm[std::size_t(d)], st.perm[std::size_t(r.below(d + 1))]);
      o = s;
      for (int d = 0; d < s.rank; ++d)
        o.ext[d] = s.ext[st.perm[std::size_t(d)]];
      break;
    }
    case kind::slice: {
      if (s.rank < 1)
        return false;
      st.axis = r.below(s.rank);
      index_t e = s.ext[st.axis];
      st.begin = r.below(e + 1);
      st.end = st.begin + r.below(e - st.begin + 1);
      st.stride = 1 + r.below(2);
      o = s;
      o.ext[st.axis] = (st.end - st.begin + st.stride - 1) / st.stride;
      break;
    }
    case kind::stack:
    case kind::concat: {
      if (op == kind::concat && s.rank < 1)
        return false;
      if (op == kind::stack && s.rank >= 4)
        return false;
      int n = 2 + r.below(2);
      st.axis = r.below(s.rank + (op == kind::stack ? 1 : 0));
      o = s;
      index_t along = 0;
      for (int i = 0; i < n; ++i) {
        int y = x;
        if (i > 0) {
          if (op == kind::stack) {
            y = same_shape(x, s);
          } else { // same extents except along the axis
            std::vector<int> c{x};
            for (int j = 0; j < int(p.dims.size()); ++j) {
              shape const &t = p.dims[std::size_t(j)];
              bool same = t.rank == s.rank;
              for (int d = 0; same && d < s.rank; ++d)
                same = d == st.axis || t.ext[d] == s.ext[d];
              if (same)
                c.push_back(j);
            }
            y = c[std::size_t(r.below(index_t(c.size())))];
          }
          st.args.push_back(y);
        }
        if (op == kind::concat)
          along += p.dims[std::size_t(y)].ext[st.axis];
        oiv = hull(oiv, p.range[std::size_t(y)]);
      }
      if (op == kind::stack) {
        o.rank = s.rank + 1;
        for (int d = 0, j = 0; d < o.rank; ++d)
          o.ext[d] = d == st.axis ? index_t(n) : s.ext[j++];
      } else {
        o.ext[st.axis] = along;
      }
      break;
    }
    case kind::broadcast_to: {
      int lead = s.rank >= 4 ? 0 : r.below(2);
      o.rank = s.rank + lead;
      for (int d = 0; d < lead; ++d)
        o.ext[d] = 1 + r.below(3);
      for (int d = 0; d < s.rank; ++d)
        o.ext[lead + d] = s.ext[d] == 1 && r.chance(1, 2) ? 2 + r.below(2) : s.ext[d];
      st.target = o;
      break;
    }
    case kind::index_select:
    case kind::gather: {
      if (s.rank < 1)
        return false;
      st.axis = r.below(s.rank);
      index_t e = s.ext[st.axis];
      index_t len = e == 0 ? 0 : r.below(op == kind::gather ? 4 : 5);
      o = s;
      o.ext[st.axis] = len;
      if (o.size() > max_size)
        return false;
      index_t cnt = op == kind::gather ? o.size() : len;
      std::vector<index_t> idx;
      for (index_t i = 0; i < cnt; ++i)
        idx.push_back(r.below(e));
      if (op == kind::gather)
        st.index = dc::index_array{o, idx};
      else
        st.indices = idx;
      break;
    }
    case kind::group:
      return false;
    }
    if (o.size() > max_size || mag(oiv) > cap)
      return false;
    add_value(o, oiv);
    return true;
  }

  void run() {
    p.seed = std::uint32_t(r.byte()) | std::uint32_t(r.byte()) << 8u |
             std::uint32_t(r.byte()) << 16u | std::uint32_t(r.byte()) << 24u;
    rng.seed(p.seed);
    p.policy = dc::policy_kind(r.below(3));
    p.special = r.chance(1, 5);
    p.wild = r.chance(1, 6) && allow_wild;
    inputs();
    int n = 1 + r.below(8);
    for (int i = 0; i < n; ++i) {
      step st;
      int c = r.below(32);
      static constexpr kind others[20] = {
          kind::sum,         kind::mean,         kind::max,          kind::min,    kind::softmax,
          kind::log_softmax, kind::logsumexp,    kind::matmul,       kind::matmul, kind::reshape,
          kind::transpose,   kind::permute,      kind::slice,        kind::slice,  kind::stack,
          kind::concat,      kind::broadcast_to, kind::index_select, kind::gather, kind::sum};
      if (c < 12 || !other(st, others[c - 12])) {
        st = step{};
        group(st);
      }
      p.steps.push_back(std::move(st));
    }
    p.weight = add_const(random_tensor(p.dims.back(), rng, -1.0, 1.0));
  }
};

} // namespace detail

// Any byte string is a valid program. With wild, one program in 6 is wild (program::wild).
inline program decode(std::uint8_t const *data, std::size_t size, bool wild = false) {
  program p;
  p.bytes.assign(data, data + size);
  detail::decoder d{reader(data, size), p, std::mt19937_64(), wild};
  d.run();
  return p;
}

// ---- printing ----------------------------------------------------------------------------------
namespace detail {
inline std::string fmt(char const *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
inline std::string ints(std::vector<int> const &v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i)
    s.append(i ? ", " : "").append(std::to_string(v[i]));
  return s + "}";
}
inline std::string values(tensor const &t) {
  std::string s = "[";
  auto v = t.to_vector();
  for (std::size_t i = 0; i < v.size(); ++i)
    s.append(i ? " " : "").append(fmt("%.17g", v[i]));
  return s + "]";
}
inline std::string instr_text(instr const &i) {
  std::string t = infos[i.code].text, o;
  for (std::size_t j = 0; j < t.size(); ++j) {
    if (t[j] != '$' || j + 1 == t.size()) {
      o += t[j];
      continue;
    }
    char c = t[++j];
    if (c == 'a' || c == 'b' || c == 'c')
      o += "r" + std::to_string(c == 'a' ? i.a : c == 'b' ? i.b : i.c);
    else if (c == 's')
      o += fmt("%g", scalars[i.imm % 8]);
    else if (c == 'n')
      o += std::to_string(powers[i.imm % 4]);
  }
  return "r" + std::to_string(i.dst) + " = " + o;
}
} // namespace detail

inline std::string hex(std::vector<std::uint8_t> const &bytes) {
  static char const digits[] = "0123456789abcdef";
  std::string s;
  for (auto b : bytes)
    s += std::string{digits[b >> 4u], digits[b & 15u]};
  return s;
}
inline std::vector<std::uint8_t> from_hex(std::string const &s) {
  std::vector<std::uint8_t> b;
  auto d = [](char c) {
    return unsigned(c <= '9' ? c - '0' : (c >= 'a' ? c - 'a' : c - 'A') + 10);
  };
  for (std::size_t i = 0; i + 1 < s.size(); i += 2)
    b.push_back(std::uint8_t(d(s[i]) << 4u | d(s[i + 1])));
  return b;
}

namespace detail {
// s += a + b + ... without the temporaries.
template <class... A> void put(std::string &s, A const &...a) { (s.append(a), ...); }
} // namespace detail

inline std::string describe(program const &p) {
  using detail::put;
  using std::to_string;
  std::string s;
  put(s, "program: seed ", to_string(p.seed), ", policy ",
      p.policy == dc::policy_kind::store       ? "store"
      : p.policy == dc::policy_kind::recompute ? "recompute"
                                               : "automatic",
      p.special ? ", special input values" : "", p.wild ? ", wild (values may be inf or NaN)" : "",
      "\n");
  auto v = [](int i) { return i < 0 ? std::string("pad") : "v" + to_string(i); };
  int next = 0;
  for (std::size_t i = 0; i < p.inputs.size(); ++i, ++next) {
    auto const &d = p.input_views[i];
    put(s, "  v", to_string(next), " = input ", dc::to_string(p.dims[i]));
    if (d.view == 1)
      put(s, " (transposed view ", to_string(d.d0), "<->", to_string(d.d1), ")");
    if (d.view == 2)
      put(s, " (every other element along ", to_string(d.d0), ")");
    put(s, " = ", detail::values(p.inputs[i]), "\n");
  }
  for (auto const &st : p.steps) {
    put(s, "  ", v(next));
    if (st.n_out == 2)
      put(s, ", ", v(next + 1));
    next += st.n_out;
    s += " = ";
    auto const a = v(st.args.empty() ? -1 : st.args[0]);
    char const *const keep = st.keepdims ? "true" : "false";
    switch (st.op) {
    case kind::group:
      put(s, "group(r0 = ", v(st.args[0]), ", r1 = ", v(st.args[1]), ", r2 = ", v(st.args[2]),
          ", K = c", to_string(st.k), " ", dc::to_string(p.consts[std::size_t(st.k)].dims()),
          ") over ", dc::to_string(st.gs), ":\n");
      for (int i = 0; i < st.bc.n; ++i)
        put(s, "      ", detail::instr_text(st.bc.ins[std::size_t(i)]), "\n");
      put(s, "      outputs r", to_string(st.bc.out[0]), ", r", to_string(st.bc.out[1]),
          st.n_out == 1 ? " (the second unused)" : "", "\n");
      break;
    case kind::sum:
    case kind::mean:
    case kind::max:
    case kind::min:
      put(s, kind_name(st.op), "(", a, ", ", detail::ints(st.axes), ", keepdims ", keep, ")\n");
      break;
    case kind::softmax:
    case kind::log_softmax:
      put(s, kind_name(st.op), "(", a, ", ", to_string(st.axis), ")\n");
      break;
    case kind::logsumexp:
      put(s, "logsumexp(", a, ", ", to_string(st.axis), ", keepdims ", keep, ")\n");
      break;
    case kind::matmul: {
      std::string c, t;
      if (st.mconst >= 0)
        put(c, "constant c", to_string(st.mconst), " ",
            dc::to_string(p.consts[std::size_t(st.mconst)].dims()));
      int const r = p.dims[std::size_t(st.args[0])].rank;
      put(t, "transpose(", a, ", ", to_string(r - 2), ", ", to_string(r - 1), ")");
      std::string const &lhs = st.mm == 1 ? t : st.mm == 3 ? c : a;
      std::string const rhs = st.mm == 0   ? t
                              : st.mm == 1 ? a
                              : st.mm == 2 ? c
                              : st.mm == 3 ? a
                                           : v(st.args[1]);
      put(s, "matmul(", lhs, ", ", rhs, ")\n");
      break;
    }
    case kind::reshape:
    case kind::broadcast_to:
      put(s, kind_name(st.op), "(", a, ", ", dc::to_string(st.target), ")\n");
      break;
    case kind::transpose:
      put(s, "transpose(", a, ", ", to_string(st.axis), ", ", to_string(st.axis2), ")\n");
      break;
    case kind::permute:
      put(s, "permute(", a, ", ", detail::ints(st.perm), ")\n");
      break;
    case kind::slice:
      put(s, "slice(", a, ", ", to_string(st.axis), ", ", to_string(st.begin), ", ",
          to_string(st.end), ", ", to_string(st.stride), ")\n");
      break;
    case kind::stack:
    case kind::concat:
      put(s, kind_name(st.op), "({");
      for (std::size_t i = 0; i < st.args.size(); ++i)
        put(s, i ? ", " : "", v(st.args[i]));
      put(s, "}, ", to_string(st.axis), ")\n");
      break;
    case kind::index_select:
    case kind::gather: {
      auto const &idx = st.op == kind::gather ? st.index.values : st.indices;
      put(s, kind_name(st.op), "(", a, ", ", to_string(st.axis), ", {");
      for (std::size_t i = 0; i < idx.size(); ++i)
        put(s, i ? ", " : "", to_string(idx[i]));
      put(s, "}");
      if (st.op == kind::gather)
        put(s, " of shape ", dc::to_string(st.index.dims));
      put(s, ")\n");
      break;
    }
    }
  }
  put(s, "  loss = sum(", v(next - 1),
      " * W), W = ", detail::values(p.consts[std::size_t(p.weight)]),
      "\n  bytes (hex): ", hex(p.bytes), "\n");
  return s;
}

// ---- running a program -------------------------------------------------------------------------
enum class formulation : std::uint8_t { fused, lazy, unfused };
inline char const *name(formulation f) {
  return f == formulation::fused ? "fused" : f == formulation::lazy ? "lazy" : "unfused";
}

struct outcome {
  std::vector<tensor> values; // every program value
  std::vector<tensor> grads;  // d loss / d input
  double loss = 0;
  // Probing (the unfused formulation, which has every operand as a value): on which side of its
  // kink each element of each operand of a non-differentiable operation lies (relu or abs: the
  // sign, min / max: which is larger, floor: the integer, a max / min reduction: the position of
  // the extremum, ...); the smallest distance to a kink and where; and sum |d loss / d v| |v|
  // over every intermediate v (how far rounding moves the loss).
  std::vector<double> sides;
  double margin = std::numeric_limits<double>::infinity();
  std::string margin_at;
  double sensitivity = 0;
};

namespace detail {

// Registers a segment [b, e) of a group's instructions reads before writing them (its inputs),
// and registers it writes that are read after it or are outputs of the group (its outputs).
inline void segment_io(bytecode const &bc, int n_out, int b, int e, std::vector<int> &in,
                       std::vector<int> &out) {
  std::array<bool, n_regs + 1> written{};
  in.clear();
  out.clear();
  auto reads = [](instr const &x, int reg) {
    std::uint8_t const rs[3] = {x.a, x.b, x.c};
    for (unsigned j = 0; j < 3; ++j)
      if (((infos[x.code].reads >> j) & 1u) != 0u && rs[j] == reg)
        return true;
    return false;
  };
  for (int i = b; i < e; ++i) {
    instr const &x = bc.ins[std::size_t(i)];
    for (int reg : {int(x.a), int(x.b), int(x.c)})
      if (reads(x, reg) && !written[std::size_t(reg)] &&
          std::find(in.begin(), in.end(), reg) == in.end())
        in.push_back(reg);
    written[x.dst] = true;
  }
  for (int reg = 0; reg < n_regs; ++reg) {
    if (!written[std::size_t(reg)])
      continue;
    bool needed = false, dead = false;
    for (int i = e; i < bc.n && !needed && !dead; ++i) {
      needed = reads(bc.ins[std::size_t(i)], reg);
      dead = bc.ins[std::size_t(i)].dst == reg;
    }
    for (int j = 0; j < n_out && !needed && !dead; ++j)
      needed = bc.out[std::size_t(j)] == reg;
    if (needed)
      out.push_back(reg);
  }
}

// Which side of its kink an operand element is on.
inline double kink_side(int code, double a, double b, double s) {
  auto sign = [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); };
  switch (code) {
  case o_floor:
    return std::floor(a);
  case o_ceil:
    return std::ceil(a);
  case o_round:
    return std::nearbyint(a) + (std::fabs(a - std::floor(a)) == 0.5 ? 0.25 : 0.0);
  case o_min:
  case o_max:
    return sign(a - b);
  case o_maxs:
  case o_mins:
    return sign(a - s);
  case o_clamps:
    return sign(a - std::fabs(s)) + 3 * sign(a + std::fabs(s));
  case o_atan2:
  case o_hypot:
    return sign(a) + 3 * sign(b);
  default:
    return sign(a);
  }
}
inline double kink_distance(int code, double a, double b, double s) {
  switch (code) {
  case o_relu:
  case o_abs:
  case o_cbrt:
  case o_where:
  case o_branch:
    return std::fabs(a);
  case o_floor:
  case o_ceil:
    return std::fabs(a - std::nearbyint(a));
  case o_round:
    return std::fabs(std::fabs(a - std::floor(a)) - 0.5);
  case o_min:
  case o_max:
    return std::fabs(a - b);
  case o_maxs:
  case o_mins:
    return std::fabs(a - s);
  case o_clamps:
    return std::min(std::fabs(a - std::fabs(s)), std::fabs(a + std::fabs(s)));
  case o_atan2:
  case o_hypot:
    return std::hypot(a, b);
  default:
    return std::numeric_limits<double>::infinity();
  }
}

struct runner {
  program const &p;
  formulation f;
  bool probe;
  dc::tape tp;
  std::vector<var> vals;
  var pad;
  tensor kpad = tensor::zeros({});
  outcome out;
  std::vector<var> probed; // every intermediate (probe)

  var keep(var const &v) {
    if (probe && v.requires_grad()) {
      v.retain_grad();
      probed.push_back(v);
    }
    return v;
  }
  void note(double d, std::string const &where) {
    if (d < out.margin) {
      out.margin = d;
      out.margin_at = where;
    }
  }
  void instr_kinks(instr const &x, var const &a, var const &b, shape const &s, int value) {
    double const sc = scalars[x.imm % 8];
    if (!std::isfinite(kink_distance(x.code, 0.0, 1.0, sc)) &&
        !std::isfinite(kink_distance(x.code, 1.0, 0.0, sc)))
      return;
    auto va = a.value().broadcast_to(s).to_vector();
    auto vb = (infos[x.code].reads & 2) != 0 ? b.value().broadcast_to(s).to_vector() : va;
    for (std::size_t i = 0; i < va.size(); ++i) {
      out.sides.push_back(kink_side(x.code, va[i], vb[i], sc));
      note(kink_distance(x.code, va[i], vb[i], sc),
           "'" + instr_text(x) + "' in the group making v" + std::to_string(value));
    }
  }
  void reduce_kinks(var const &x, std::vector<int> const &axes, bool is_max, int value) {
    auto mask = dc::detail::axis_mask("kinks", axes, x.rank());
    index_t n_red = 1;
    for (int d = 0; d < x.rank(); ++d)
      if (mask[std::size_t(d)])
        n_red *= x.dims().ext[d];
    if (n_red < 2)
      return;
    auto v = x.value().permuted(dc::detail::kept_then_reduced(mask)).to_vector();
    for (std::size_t g = 0; g + std::size_t(n_red) <= v.size(); g += std::size_t(n_red)) {
      auto const *first = v.data() + g;
      auto const *best =
          is_max ? std::max_element(first, first + n_red) : std::min_element(first, first + n_red);
      double gap = std::numeric_limits<double>::infinity();
      for (index_t j = 0; j < n_red; ++j)
        if (first + j != best)
          gap = std::min(gap, std::fabs(first[j] - *best));
      out.sides.push_back(double(best - first) + (gap == 0 ? 0.5 : 0.0));
      note(gap, "a tie in the reduction making v" + std::to_string(value));
    }
  }

  var node(bytecode const &bc, var const &a, var const &b, var const &c, tensor const &k, int o) {
    return dc::fused(dc::kernel(interp{bc}), a, b, c, k)[std::size_t(o)];
  }

  void group(step const &st) {
    int const first = int(vals.size());
    std::array<var, 3> args;
    for (std::size_t k = 0; k < 3; ++k)
      args[k] = st.args[k] < 0 ? pad : vals[std::size_t(st.args[k])];
    tensor const &kt = p.consts[std::size_t(st.k)];
    if (f == formulation::fused) {
      auto o = dc::fused(dc::kernel(interp{st.bc}), args[0], args[1], args[2], kt);
      for (int j = 0; j < st.n_out; ++j)
        vals.push_back(o[std::size_t(j)]);
      return;
    }
    std::array<var, n_regs + 1> reg;
    for (std::size_t k = 0; k < 3; ++k)
      reg[k] = args[k];
    std::vector<int> in, outs;
    for (int i = 0; i < st.bc.n;) {
      instr const &x = st.bc.ins[std::size_t(i)];
      int e = i + 1;
      if (f == formulation::lazy && !is_template(x.code))
        for (int j = i + 2; j <= st.bc.n && !is_template(st.bc.ins[std::size_t(j - 1)].code); ++j) {
          segment_io(st.bc, st.n_out, i, j, in, outs);
          if (in.size() <= 3 && outs.size() <= 2)
            e = j;
        }
      if (is_template(x.code)) {
        reg[x.dst] = keep(template_node(x.code, reg[x.a], reg[x.b], reg[x.c], kt));
      } else {
        segment_io(st.bc, st.n_out, i, e, in, outs);
        if (outs.empty())
          outs.push_back(st.bc.ins[std::size_t(e - 1)].dst);
        bytecode nb;
        nb.n = std::uint8_t(e - i);
        bool uses_k = false;
        for (int j = i; j < e; ++j) {
          nb.ins[std::size_t(j - i)] = st.bc.ins[std::size_t(j)];
          uses_k = uses_k || infos[st.bc.ins[std::size_t(j)].code].k;
        }
        nb.in = {n_regs, n_regs, n_regs};
        std::array<var, 3> a{pad, pad, pad};
        for (std::size_t k = 0; k < in.size(); ++k) {
          nb.in[k] = std::uint8_t(in[k]);
          a[k] = reg[std::size_t(in[k])];
        }
        nb.out = {std::uint8_t(outs[0]), std::uint8_t(outs.size() > 1 ? outs[1] : outs[0])};
        auto o = dc::fused(dc::kernel(interp{nb}), a[0], a[1], a[2], uses_k ? kt : kpad);
        if (probe && e == i + 1)
          instr_kinks(x, reg[x.a], reg[x.b], o[0].dims(), first);
        for (std::size_t j = 0; j < outs.size(); ++j)
          reg[std::size_t(outs[j])] = keep(o[j]);
      }
      i = e;
    }
    for (int j = 0; j < st.n_out; ++j) {
      var v = reg[st.bc.out[std::size_t(j)]];
      vals.push_back(v.dims() == st.gs ? v : keep(dc::broadcast_to(v, st.gs)));
    }
  }

  void other(step const &st) {
    var const x = vals[std::size_t(st.args[0])];
    int const value = int(vals.size());
    auto items = [&] {
      std::vector<var> v;
      for (int a : st.args)
        v.push_back(vals[std::size_t(a)]);
      return v;
    };
    var y;
    switch (st.op) {
    case kind::sum:
      y = dc::sum(x, st.axes, st.keepdims);
      break;
    case kind::mean:
      y = mean_node(x, st.axes, st.keepdims);
      break;
    case kind::max:
    case kind::min:
      if (probe)
        reduce_kinks(x, st.axes, st.op == kind::max, value);
      y = st.op == kind::max ? dc::max(x, st.axes, st.keepdims) : dc::min(x, st.axes, st.keepdims);
      break;
    case kind::softmax:
      y = dc::softmax(x, st.axis);
      break;
    case kind::log_softmax:
      y = dc::log_softmax(x, st.axis);
      break;
    case kind::logsumexp:
      y = dc::logsumexp(x, st.axis, st.keepdims);
      break;
    case kind::matmul: {
      int r = x.rank();
      switch (st.mm) {
      case 0:
        y = dc::matmul(x, dc::transpose(x, r - 2, r - 1));
        break;
      case 1:
        y = dc::matmul(dc::transpose(x, r - 2, r - 1), x);
        break;
      case 2:
        y = dc::matmul(x, tp.constant(p.consts[std::size_t(st.mconst)]));
        break;
      case 3:
        y = dc::matmul(tp.constant(p.consts[std::size_t(st.mconst)]), x);
        break;
      default:
        y = dc::matmul(x, vals[std::size_t(st.args[1])]);
        break;
      }
      break;
    }
    case kind::reshape:
      y = dc::reshape(x, st.target);
      break;
    case kind::transpose:
      y = dc::transpose(x, st.axis, st.axis2);
      break;
    case kind::permute:
      y = dc::permute(x, st.perm);
      break;
    case kind::slice:
      y = dc::slice(x, st.axis, st.begin, st.end, st.stride);
      break;
    case kind::stack:
      y = dc::stack(items(), st.axis);
      break;
    case kind::concat:
      y = dc::concat(items(), st.axis);
      break;
    case kind::broadcast_to:
      y = dc::broadcast_to(x, st.target);
      break;
    case kind::index_select:
      y = dc::index_select(x, st.axis, st.indices);
      break;
    case kind::gather:
      y = dc::gather(x, st.axis, st.index);
      break;
    case kind::group:
      break;
    }
    vals.push_back(keep(y));
  }

  void run(std::vector<tensor> const &inputs, bool grad) {
    tp.fused = f != formulation::unfused;
    tp.default_policy = p.policy;
    std::vector<var> in;
    for (auto const &x : inputs)
      in.push_back(tp.variable(x, grad));
    vals = in;
    pad = tp.constant(tensor::zeros({}));
    for (auto const &st : p.steps) {
      if (st.op == kind::group)
        group(st);
      else
        other(st);
    }
    // loss = sum(y * W)
    bytecode lb;
    lb.n = 1;
    lb.ins[0] = {o_mulk, 3, 0, 0, 0, 0};
    lb.out = {3, 3};
    var loss = dc::sum(node(lb, vals.back(), pad, pad, p.consts[std::size_t(p.weight)], 0));
    out.loss = loss.item();
    for (auto const &v : vals)
      out.values.push_back(v.value());
    if (grad) {
      if (loss.requires_grad()) // (not where the last value depends on no input)
        tp.backward(loss);
      for (auto const &v : in)
        out.grads.push_back(v.grad());
      for (auto const &v : in)
        probed.push_back(v);
      for (auto const &v : probed) {
        if (!v.has_grad())
          continue;
        auto g = v.grad().to_vector(), x = v.value().to_vector();
        for (std::size_t i = 0; i < g.size(); ++i)
          out.sensitivity += std::fabs(g[i] * x[i]);
      }
    }
  }
};

} // namespace detail

// Runs p in formulation f on the given input values (p.inputs, or perturbed copies); with grad,
// the inputs are variables and backward runs; with probe (unfused only), the kinks and the
// sensitivity are recorded (outcome), and every intermediate keeps its gradient.
inline outcome run(program const &p, formulation f, std::vector<tensor> const &inputs, bool grad,
                   bool probe = false) {
  detail::runner r{p, f, probe && f == formulation::unfused, {}, {}, {}, tensor::zeros({}), {}, {}};
  r.run(inputs, grad);
  return std::move(r.out);
}

// ---- checking a program ------------------------------------------------------------------------
inline constexpr int n_kinds = int(kind::gather) + 1;
struct stats {
  long programs = 0, fd_checked = 0, fd_skipped = 0;
  double worst_value = 0, worst_grad = 0, worst_fd = 0; // largest error / tolerance seen
  std::array<long, o_count> instructions{};             // how often each was run
  std::array<long, n_kinds> operations{};
};

namespace detail {

// "" if a, b and c (the fused, lazy and unfused results) agree: the same shape, the same
// finiteness element by element, and within rtol relative to the larger magnitude (of the
// element, or 1e-3 of the tensor's largest: rounding in a sum that cancels) plus atol.
inline std::string agree(std::string const &what, tensor const &a, tensor const &b, tensor const &c,
                         double rtol, double atol, double &worst) {
  if (!(a.dims() == b.dims()) || !(a.dims() == c.dims()))
    return what + ": shapes differ: fused " + dc::to_string(a.dims()) + ", lazy " +
           dc::to_string(b.dims()) + ", unfused " + dc::to_string(c.dims());
  auto va = a.to_vector(), vb = b.to_vector(), vc = c.to_vector();
  double big = 0;
  for (auto const *v : {&va, &vb, &vc})
    for (double x : *v)
      if (std::isfinite(x))
        big = std::max(big, std::fabs(x));
  for (std::size_t i = 0; i < va.size(); ++i) {
    bool const fa = std::isfinite(va[i]), fb = std::isfinite(vb[i]), fc = std::isfinite(vc[i]);
    double const m = std::max({std::fabs(va[i]), std::fabs(vb[i]), std::fabs(vc[i]), 1e-3 * big});
    double const err = std::max(std::fabs(va[i] - vb[i]), std::fabs(va[i] - vc[i]));
    double const tol = rtol * m + atol;
    bool const ok = fa == fb && fa == fc && (!fa || err <= tol);
    if (fa && fb && fc && tol > 0)
      worst = std::max(worst, err / tol);
    if (!ok)
      return what + ", element " + std::to_string(i) + " (row-major) of " +
             dc::to_string(a.dims()) + ": fused " + fmt("%.17g", va[i]) + ", lazy " +
             fmt("%.17g", vb[i]) + ", unfused " + fmt("%.17g", vc[i]);
  }
  return "";
}

inline std::string checked(program const &p, stats *st) {
  outcome o[3];
  formulation const fs[3] = {formulation::fused, formulation::lazy, formulation::unfused};
  for (int i = 0; i < 3; ++i) {
    try {
      o[i] = run(p, fs[i], p.inputs, true);
    } catch (std::exception const &e) {
      return std::string("the ") + name(fs[i]) + " formulation threw: " + e.what();
    }
  }
  double scale = 0; // the sum of |terms| of the loss
  {
    auto y = o[0].values.back().to_vector();
    auto w = p.consts[std::size_t(p.weight)].to_vector();
    for (std::size_t i = 0; i < y.size(); ++i)
      if (std::isfinite(y[i] * w[i]))
        scale += std::fabs(y[i] * w[i]);
  }
  double worst_v = 0, worst_g = 0;
  for (std::size_t v = 0; v < p.dims.size(); ++v) {
    std::string m = agree("value v" + std::to_string(v), o[0].values[v], o[1].values[v],
                          o[2].values[v], 1e-12, 0.0, worst_v);
    if (!m.empty())
      return m;
  }
  // (the loss relative to its terms: their sum may cancel)
  std::string m = agree("the loss", tensor::scalar(o[0].loss), tensor::scalar(o[1].loss),
                        tensor::scalar(o[2].loss), 1e-12, 1e-12 * scale, worst_v);
  if (!m.empty())
    return m;
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    m = agree("d loss / d v" + std::to_string(i), o[0].grads[i], o[1].grads[i], o[2].grads[i],
              1e-12, 1e-10 * std::max(scale, 1.0), worst_g);
    if (!m.empty())
      return m;
  }
  // Values without gradients (the apply path of fused nodes) against those with.
  outcome plain;
  try {
    plain = run(p, formulation::fused, p.inputs, false);
  } catch (std::exception const &e) {
    return std::string("the fused formulation without gradients threw: ") + e.what();
  }
  m = agree("the loss without gradients", tensor::scalar(plain.loss), tensor::scalar(o[0].loss),
            tensor::scalar(o[0].loss), 1e-12, 1e-12 * scale, worst_v);
  if (!m.empty())
    return m;
  if (st) {
    ++st->programs;
    st->worst_value = std::max(st->worst_value, worst_v);
    st->worst_grad = std::max(st->worst_grad, worst_g);
  }

  if (p.wild)
    return "";
  // Central differences along two random directions, where no operand of a non-differentiable
  // operation crosses its kink on the way (the probe runs compare the sides).
  outcome probe;
  try {
    probe = run(p, formulation::unfused, p.inputs, true, true);
  } catch (std::exception const &e) {
    return std::string("the unfused formulation (probing) threw: ") + e.what();
  }
  std::mt19937_64 rng(p.seed ^ 0x5deece66dULL);
  double const h = 1e-6;
  bool checked_one = false;
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<double> dv;
    double gv = 0, agv = 0;
    for (std::size_t i = 0; i < p.inputs.size(); ++i) {
      auto g = o[0].grads[i].to_vector();
      auto d = random_tensor(p.dims[i], rng, -1.0, 1.0).to_vector();
      for (std::size_t j = 0; j < g.size(); ++j) {
        gv += g[j] * d[j];
        agv += std::fabs(g[j] * d[j]);
      }
      dv.insert(dv.end(), d.begin(), d.end());
    }
    auto moved = [&](double step) {
      std::vector<tensor> xs;
      std::size_t at = 0;
      for (std::size_t i = 0; i < p.inputs.size(); ++i) {
        auto x = p.inputs[i].to_vector();
        for (double &e : x)
          e += step * dv[at++];
        xs.push_back(tensor::from(p.dims[i], x));
      }
      return xs;
    };
    // D(t) = (L(x + t h v) - L(x - t h v)) / (2 t h) for t = 1, 2, 4: D(1) is compared, the
    // differences between the three estimate its truncation error; sensitivity bounds rounding.
    double D[3] = {};
    try {
      if (run(p, formulation::unfused, moved(4 * h), false, true).sides != probe.sides ||
          run(p, formulation::unfused, moved(-4 * h), false, true).sides != probe.sides)
        continue; // a kink crossed
      for (int t = 0; t < 3; ++t) {
        double const step = h * double(1 << t);
        D[t] = (run(p, formulation::fused, moved(step), false).loss -
                run(p, formulation::fused, moved(-step), false).loss) /
               (2 * step);
      }
    } catch (std::exception const &e) {
      return std::string("a formulation threw on perturbed inputs: ") + e.what();
    }
    checked_one = true;
    double const noise = std::max(std::fabs(D[0] - D[1]), std::fabs(D[1] - D[2]));
    double const tol = 1e-6 * agv + 4 * noise + 1e-15 * probe.sensitivity / h + 1e-13;
    double const err = std::fabs(D[0] - gv);
    if (st)
      st->worst_fd = std::max(st->worst_fd, err / tol);
    if (!(err <= tol))
      return "directional derivative " + std::to_string(dir) + ": the gradients give " +
             fmt("%.17g", gv) + ", central differences " + fmt("%.17g", D[0]) +
             " (steps 2e-6: " + fmt("%.17g", D[1]) + ", 4e-6: " + fmt("%.17g", D[2]) +
             "; tolerance " + fmt("%.3g", tol) + "; the closest kink " + fmt("%.3g", probe.margin) +
             (probe.margin_at.empty() ? "" : " at " + probe.margin_at) + ")";
  }
  if (!checked_one) {
    if (st)
      ++st->fd_skipped;
    return "";
  }
  if (st)
    ++st->fd_checked;
  return "";
}

} // namespace detail

// "" if the program passes every check, else what failed followed by the program.
inline std::string check(program const &p, stats *st = nullptr) {
  if (st)
    for (auto const &x : p.steps) {
      ++st->operations[std::size_t(x.op)];
      for (int i = 0; i < x.bc.n; ++i)
        ++st->instructions[x.bc.ins[std::size_t(i)].code];
    }
  std::string m = detail::checked(p, st);
  return m.empty() ? m : "MISMATCH: " + m + "\n" + describe(p);
}
inline std::string check(std::uint8_t const *data, std::size_t size, stats *st = nullptr,
                         bool wild = false) {
  return check(decode(data, size, wild), st);
}

} // namespace tape_fuzz
