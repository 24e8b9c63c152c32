// The ready cells of dualcast/kernel/cells.hpp as PyTorch operators (dualcast::lstm_cell, ...),
// which python/dualcast/torch.py wraps as lstm_cell, gru_cell and hmlstm_update. One translation
// unit: torch's headers dominate its compile time. torch_cells.cu holds the CUDA half (built where
// torch has CUDA). Each cell also gets a reference entry (dualcast::apply / vjp called directly on
// the host, no torch) for the tests' bit-for-bit comparison.
#include <dualcast/interop/detail/reference_entry.hpp>
#include <dualcast/interop/torch.hpp>
#include <dualcast/kernel/cells.hpp>

DUALCAST_TORCH_KERNEL(
    dualcast, lstm_cell, dualcast::cells::lstm,
    .doc = "LSTM cell update from the gate pre-activations i, f, g, o and the previous cell state "
           "c: c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c'). Returns (h', "
           "c'). One fused pass forward, one fused pass backward.",
    .args = "i, f, g, o, c")

// 7 differentiable arguments: above interop::max_subset_inputs, so its vjp runs with every
// argument active (the cotangents not asked for are computed into scratch).
DUALCAST_TORCH_KERNEL(
    dualcast, gru_cell, dualcast::cells::gru,
    .doc = "GRU cell update (PyTorch's formulation) from the input projections x_r, x_z, x_n and "
           "the hidden projections h_r, h_z, h_n (biases included) and the previous state h: r = "
           "sigmoid(x_r + h_r), z = sigmoid(x_z + h_z), n = tanh(x_n + r h_n), h' = (1 - z) n + "
           "z h. Returns h'.",
    .args = "x_r, x_z, x_n, h_r, h_z, h_n, h")

DUALCAST_TORCH_KERNEL(
    dualcast, hmlstm_update, dualcast::cells::hmlstm_update,
    .doc = "HM-LSTM cell-state update with the boundary masks z (this layer, previous step) and "
           "zb (the layer below, this step), 0 or 1: FLUSH (z == 1) c' = sigmoid(i) tanh(g); COPY "
           "(z == 0, zb == 0) c' = c; UPDATE c' = sigmoid(f) c + sigmoid(i) tanh(g). The masks "
           "are not differentiated.",
    .args = "z, zb, c, f, i, g", .nondiff = 0b11u)

DUALCAST_REFERENCE_ENTRY(lstm_cell, dualcast::cells::lstm);
DUALCAST_REFERENCE_ENTRY(gru_cell, dualcast::cells::gru);
DUALCAST_REFERENCE_ENTRY(hmlstm_update, dualcast::cells::hmlstm_update, 2, 3, 4, 5);
