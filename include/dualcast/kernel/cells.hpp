// dualcast/kernel/cells.hpp: ready recurrent cells as fused kernels.
//
// Each cell is ONE elementwise kernel over the gate pre-activations (what the user's matmuls
// produce) and the previous state. Being a dualcast::kernel, a cell runs
//   - on plain numbers or dual numbers directly: auto [h, c] = dualcast::cells::lstm(i, f, g, o,
//   c0);
//   - over views as one fused pass: dualcast::apply / jvp / vjp (broadcast/broadcast.hpp);
//   - on tape variables as one fused node: dualcast::fused(dualcast::cells::lstm, ...), or the
//     wrappers of ops/cells.hpp (lstm_cell, gru_cell, hmlstm_update, dlstm_cell).
// No derivative is written anywhere: partials come from dual numbers.
//
// Each cell is a function object with a host/device call operator (so nvcc can run it) and a
// dualcast::kernel constant of it.
#pragma once

#include <dualcast/core/config.hpp>
#include <dualcast/kernel/kernel.hpp>
#include <dualcast/math/functions.hpp>

namespace dualcast {
namespace cells {

// LSTM: gates (i, f, g, o) before their activations and the previous cell state c:
//   c' = sigmoid(f) c + sigmoid(i) tanh(g),   h' = sigmoid(o) tanh(c').   Returns (h', c').
struct lstm_fn {
  static constexpr bool sparse_partials = sparse_partials_on_host;
  template <class I, class F, class G, class O, class C>
  DUALCAST_HD auto operator()(I const &i, F const &f, G const &g, O const &o, C const &c) const {
    auto c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);
    return outputs(sigmoid(o) * tanh(c2), c2);
  }
};
inline constexpr kernel<lstm_fn> lstm{lstm_fn{}};

// GRU (PyTorch's formulation): the input projections (x_r, x_z, x_n) and the hidden projections
// (h_r, h_z, h_n), biases included, and the previous hidden state h:
//   r = sigmoid(x_r + h_r), z = sigmoid(x_z + h_z), n = tanh(x_n + r h_n),
//   h' = (1 - z) n + z h.   Returns h'.
struct gru_fn {
  static constexpr bool sparse_partials = sparse_partials_on_host;
  template <class XR, class XZ, class XN, class HR, class HZ, class HN, class H>
  DUALCAST_HD auto operator()(XR const &xr, XZ const &xz, XN const &xn, HR const &hr, HZ const &hz,
                              HN const &hn, H const &h) const {
    auto r = sigmoid(xr + hr);
    auto z = sigmoid(xz + hz);
    auto n = tanh(xn + r * hn);
    return n + z * (h - n); // (1 - z) n + z h
  }
};
inline constexpr kernel<gru_fn> gru{gru_fn{}};

// The HM-LSTM cell-state update (Chung et al., ICLR 2017) with real branches per element, from the
// boundary masks z (this layer's, previous step) and zb (the layer below's, this step), 0 or 1:
//   FLUSH  (z == 1):            c' = sigmoid(i) tanh(g)
//   COPY   (z == 0, zb == 0):   c' = c
//   UPDATE (otherwise):         c' = sigmoid(f) c + sigmoid(i) tanh(g)
// Arguments (z, zb, c, f, i, g); pass the masks as constants (tensors, not variables) so that they
// are never dualized. Written with branch() (math/branch.hpp): a SIMD batch whose lanes agree
// skips what its branch does not need (COPY: everything), one whose lanes disagree computes
// sigmoid(i) tanh(g) once for FLUSH and UPDATE and blends, as the select formulation does -- `if`
// statements here re-ran the cell per path and took 1.9x select's time on divergent batches
// (docs/kernels.md, "Branches and divergence"). The results are the select formulation's bit for
// bit (tests/test_broadcast.cpp).
struct hmlstm_update_fn {
  template <class Z, class ZB, class C, class F, class I, class G>
  DUALCAST_HD auto operator()(Z const &z, ZB const &zb, C const &c, F const &f, I const &i,
                              G const &g) const {
    // One return type for all branches (c may be a constant where f, i, g are active).
    using R = decltype(sigmoid(f) * c + sigmoid(i) * tanh(g));
    return branch(
        z == 0 && zb == 0, [&] { return R(c); }, // COPY
        [&] {
          // sigmoid(f) beside sigmoid(i) tanh(g), in one basic block, where GCC interleaves the
          // three exp chains: after the FLUSH test a divergent batch took 1.16x select's time,
          // here 1.05x (one thread, n = 512), and uniform batches are no slower for it.
          auto ig = sigmoid(i) * tanh(g);
          auto sf = sigmoid(f);
          return branch(
              z == 1, [&] { return R(ig); },   // FLUSH
              [&] { return R(sf * c + ig); }); // UPDATE
        });
  }
};
inline constexpr kernel<hmlstm_update_fn> hmlstm_update{hmlstm_update_fn{}};

// ADBench's diagonal LSTM (D-LSTM) layer-step, everything elementwise: the input x, the state
// (h, s), the diagonal weights (w_f, w_i, w_o, w_g) and biases (b_f, b_i, b_o, b_g):
//   f = sigmoid(x w_f + b_f), i = sigmoid(h w_i + b_i), o = sigmoid(x w_o + b_o),
//   g = tanh(h w_g + b_g), s' = s f + i g, h' = o tanh(s').   Returns (h', s').
// With sparse partials on the CPU (kernel/kernel.hpp): each gate depends on three of the eleven
// inputs, and the VJP of all eleven runs in one evaluation instead of two. On a GPU the dense
// duals: the sparse ones took the double VJP's strided kernel to 128 registers and a spill.
struct dlstm_fn {
  static constexpr bool sparse_partials = sparse_partials_on_host;
  template <class X, class H, class S, class WF, class WI, class WO, class WG, class BF, class BI,
            class BO, class BG>
  DUALCAST_HD auto operator()(X const &x, H const &h, S const &s, WF const &wf, WI const &wi,
                              WO const &wo, WG const &wg, BF const &bf, BI const &bi, BO const &bo,
                              BG const &bg) const {
    auto f = sigmoid(x * wf + bf);
    auto i = sigmoid(h * wi + bi);
    auto o = sigmoid(x * wo + bo);
    auto g = tanh(h * wg + bg);
    auto s2 = s * f + i * g;
    return outputs(o * tanh(s2), s2);
  }
};
inline constexpr kernel<dlstm_fn> dlstm{dlstm_fn{}};

} // namespace cells
} // namespace dualcast
