# The README's PyTorch example (docs/interop.md): dualcast's fused LSTM cell in a torch program.
import torch
import dualcast.torch as dct

B, I, H = 32, 16, 64
x, h, c = torch.randn(B, I), torch.zeros(B, H), torch.zeros(B, H)
gates = torch.nn.Linear(I + H, 4 * H)                 # torch computes the gates ...
i, f, g, o = gates(torch.cat([x, h], 1)).chunk(4, 1)
h, c = dct.lstm_cell(i, f, g, o, c)                   # ... dualcast fuses the cell (one kernel)
(h.square().mean() + c.square().mean()).backward()   # one fused backward kernel
print("gradient norm of the gate weights:", gates.weight.grad.norm().item())
