// Instantiates the ready cells' fused kernels (dualcast/kernel/cells.hpp: LSTM, GRU, HM-LSTM
// update, D-LSTM) for the CUDA backend in the three modes the tape runs them in -- values, values
// with every diagonal partial (the store policy), and the VJP that re-evaluates the duals (the
// recompute policy) -- on contiguous float32 arrays, plus broadcast VJPs in double (the LSTM cell
// over subsets of its inputs, as the PyTorch operator runs it) and the LSTM cell over bfloat16
// gates. CI compiles them for sm_80 / sm_90 and fails on a register spill; scripts/cuda-resources
// turns ptxas' report into docs/gpu.md's table of bytes and registers per cell. Nothing here
// runs: the GPU tests are in cases_gpu.cu / tape_cases_gpu.cu.
#include <dualcast/cuda.cuh>
#include <dualcast/kernel/cells.hpp>

namespace dc = dualcast;

namespace {
using in_t = dc::view<const float>;
using out_t = dc::view<float>;

struct biased_tanh {
  template <class X, class B, class S> DUALCAST_HD auto operator()(X x, B b, S s) const {
    return dc::tanh(x + b) * s;
  }
};
constexpr dc::kernel<biased_tanh> biased{biased_tanh{}};
} // namespace

// Host entry points (never called in CI); they force the kernels to be instantiated. x: the
// inputs, y: the outputs, d: the partials (output-major), ybar / xbar: cotangents.
void lstm_kernels(dc::cuda ex, in_t const *x, out_t const *y, out_t const *d, in_t const *ybar,
                  out_t const *xbar) {
  dc::apply(ex, dc::cells::lstm, dc::out(y[0], y[1]), x[0], x[1], x[2], x[3], x[4]);
  dc::apply(ex, dc::cells::lstm, dc::active<0, 1, 2, 3, 4>, dc::out(y[0], y[1]),
            dc::out(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9]), x[0], x[1], x[2],
            x[3], x[4]);
  dc::vjp(ex, dc::cells::lstm, dc::out(xbar[0], xbar[1], xbar[2], xbar[3], xbar[4]),
          dc::in(x[0], x[1], x[2], x[3], x[4]), dc::in(ybar[0], ybar[1]));
}

void gru_kernels(dc::cuda ex, in_t const *x, out_t const *y, out_t const *d, in_t const *ybar,
                 out_t const *xbar) {
  dc::apply(ex, dc::cells::gru, dc::out(y[0]), x[0], x[1], x[2], x[3], x[4], x[5], x[6]);
  dc::apply(ex, dc::cells::gru, dc::active<0, 1, 2, 3, 4, 5, 6>, dc::out(y[0]),
            dc::out(d[0], d[1], d[2], d[3], d[4], d[5], d[6]), x[0], x[1], x[2], x[3], x[4], x[5],
            x[6]);
  dc::vjp(ex, dc::cells::gru,
          dc::out(xbar[0], xbar[1], xbar[2], xbar[3], xbar[4], xbar[5], xbar[6]),
          dc::in(x[0], x[1], x[2], x[3], x[4], x[5], x[6]), dc::in(ybar[0]));
}

// The masks z, zb (arguments 0, 1) are constants: only c, f, i, g are active, as in the paper.
void hmlstm_kernels(dc::cuda ex, in_t const *x, out_t const *y, out_t const *d, in_t const *ybar,
                    out_t const *xbar) {
  dc::apply(ex, dc::cells::hmlstm_update, dc::out(y[0]), x[0], x[1], x[2], x[3], x[4], x[5]);
  dc::apply(ex, dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>, dc::out(y[0]),
            dc::out(d[0], d[1], d[2], d[3]), x[0], x[1], x[2], x[3], x[4], x[5]);
  dc::vjp(ex, dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>,
          dc::out(xbar[0], xbar[1], xbar[2], xbar[3]), dc::in(x[0], x[1], x[2], x[3], x[4], x[5]),
          dc::in(ybar[0]));
}

void dlstm_kernels(dc::cuda ex, in_t const *x, out_t const *y, out_t const *d, in_t const *ybar,
                   out_t const *xbar) {
  dc::apply(ex, dc::cells::dlstm, dc::out(y[0], y[1]), x[0], x[1], x[2], x[3], x[4], x[5], x[6],
            x[7], x[8], x[9], x[10]);
  dc::apply(ex, dc::cells::dlstm, dc::active<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10>, dc::out(y[0], y[1]),
            dc::out(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12],
                    d[13], d[14], d[15], d[16], d[17], d[18], d[19], d[20], d[21]),
            x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10]);
  dc::vjp(ex, dc::cells::dlstm,
          dc::out(xbar[0], xbar[1], xbar[2], xbar[3], xbar[4], xbar[5], xbar[6], xbar[7], xbar[8],
                  xbar[9], xbar[10]),
          dc::in(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10]),
          dc::in(ybar[0], ybar[1]));
}

void biased_vjp(dc::cuda ex, dc::view<const double> x, dc::view<const double> b,
                dc::view<const double> ybar, dc::view<double> xbar, dc::view<double> bbar) {
  dc::vjp(ex, biased, dc::active<0, 1>, dc::out(xbar, bbar), dc::in(x, b, 0.5), dc::in(ybar));
}

// The LSTM cell's VJP in double over a subset of its inputs, as the PyTorch operator's CUDA half
// (python/src/torch_cells.cu) runs it for what torch differentiates: over 2-D broadcast layouts
// (map_rows<double, 7, 4>) the gates' subset and the one without the first gate spilled 20 bytes
// on sm_90 while the outputs' offsets stayed live across the operation (backend/cuda/map.cuh).
void lstm_vjp_subsets(dc::cuda ex, dc::view<const double> const *x,
                      dc::view<const double> const *ybar, dc::view<double> const *xbar) {
  dc::vjp(ex, dc::cells::lstm, dc::active<0, 1, 2, 3>, dc::out(xbar[0], xbar[1], xbar[2], xbar[3]),
          dc::in(x[0], x[1], x[2], x[3], x[4]), dc::in(ybar[0], ybar[1]));
  dc::vjp(ex, dc::cells::lstm, dc::active<1, 2, 3, 4>, dc::out(xbar[0], xbar[1], xbar[2], xbar[3]),
          dc::in(x[0], x[1], x[2], x[3], x[4]), dc::in(ybar[0], ybar[1]));
}

// The LSTM cell over bfloat16 gates beside a float cell state (issue 37): 16-bit loads widened to
// float, results rounded once on store, in the element-wise kernels (map_strided, map_rows).
void lstm_kernels_bf16(dc::cuda ex, dc::view<const dc::bfloat16> const *x, dc::view<const float> c,
                       dc::view<dc::bfloat16> h, dc::view<float> c2,
                       dc::view<const dc::bfloat16> hbar, dc::view<const float> cbar,
                       dc::view<dc::bfloat16> const *xbar, dc::view<float> cellbar) {
  dc::value_and_vjp(ex, dc::cells::lstm, dc::out(h, c2),
                    dc::out(xbar[0], xbar[1], xbar[2], xbar[3], cellbar),
                    dc::in(x[0], x[1], x[2], x[3], c), dc::in(hbar, cbar));
}

// The cell's values alone over contiguous bfloat16 / half gates (7 arrays): map_contiguous's
// vector path, four elements per thread and operand (8-byte loads of the 16-bit ones widened to a
// float4, rounded back on store).
template <class T16>
void lstm_values_16(dc::cuda ex, dc::view<const T16> const *x, dc::view<const float> c,
                    dc::view<T16> h, dc::view<float> c2) {
  dc::apply(ex, dc::cells::lstm, dc::out(h, c2), x[0], x[1], x[2], x[3], c);
}
template void lstm_values_16<dc::bfloat16>(dc::cuda, dc::view<const dc::bfloat16> const *,
                                           dc::view<const float>, dc::view<dc::bfloat16>,
                                           dc::view<float>);
template void lstm_values_16<dc::half>(dc::cuda, dc::view<const dc::half> const *,
                                       dc::view<const float>, dc::view<dc::half>, dc::view<float>);

// sum / mean of 16-bit tape variables: the broadcast reduction reading 16 bits, summing in float.
void sum_float16(dc::cuda ex, dc::shape const &s, dc::bfloat16 const *b, dc::half const *h,
                 dc::view<float> dst) {
  dc::detail::backend_reduce(dc::detail::hook{}, ex, s, b, dst, false);
  dc::detail::backend_reduce(dc::detail::hook{}, ex, s, h, dst, false);
}
