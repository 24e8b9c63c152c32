"""The demo's character-level LSTM language model (examples/char_lstm.cpp) in PyTorch, with
dualcast's fused LSTM cell as the cell update.

Each character picks a row of W_x (4H gate pre-activations: an embedding straight into gate
space), h W_h + b is added, and dualcast.torch.lstm_cell gives the next (h, c): ONE fused kernel
forward and one backward, everything else is torch. The hidden states of all steps go through
one linear layer to logits and the cross-entropy of the next character; Adam updates the
parameters. The text is the C++ demo's (read from examples/models/char_lstm.hpp).

    python3 examples/python/torch_char_lstm.py [--steps 300] [--hidden 128] [--batch 32]
        [--seq 32] [--check]

(with PYTHONPATH=python and the package built: pip install --no-build-isolation ./python, or
DUALCAST_TORCH_CELLS pointing at a built _torch_cells library). --check: exit status 1 unless
the loss fell to below 75 % of its first value. Prints the loss falling and a sampled line.
"""

import argparse
import os
import re
import sys
import time

import torch

import dualcast.torch as dct


def corpus():
    here = os.path.dirname(os.path.abspath(__file__))
    header = os.path.join(here, "..", "models", "char_lstm.hpp")
    with open(header) as f:
        text = f.read()
    block = text[text.index("corpus ="): text.index(";", text.index("corpus ="))]
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', block))


class CharLSTM(torch.nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.hidden = hidden
        s = 1.0 / hidden ** 0.5
        self.wx = torch.nn.Parameter(torch.empty(vocab, 4 * hidden).uniform_(-s, s))
        self.wh = torch.nn.Parameter(torch.empty(hidden, 4 * hidden).uniform_(-s, s))
        self.b = torch.nn.Parameter(torch.zeros(4 * hidden))
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, idx, state=None):  # idx: (seq, batch) of character indices
        seq, batch = idx.shape
        h, c = state if state is not None else (torch.zeros(batch, self.hidden),) * 2
        hs = []
        for t in range(seq):
            gates = self.wx[idx[t]] + h @ self.wh + self.b
            i, f, g, o = gates.chunk(4, dim=1)  # strided views: no copies
            h, c = dct.lstm_cell(i, f, g, o, c)  # dualcast: one fused kernel
            hs.append(h)
        return self.out(torch.stack(hs)), (h, c)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    text = corpus()
    chars = sorted(set(text))
    code = {ch: k for k, ch in enumerate(chars)}
    data = torch.tensor([code[ch] for ch in text])
    model = CharLSTM(len(chars), a.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    print("%d characters, vocabulary %d, hidden %d, batch %d x %d, %d Adam steps"
          % (len(text), len(chars), a.hidden, a.batch, a.seq, a.steps))
    first = last = None
    t0 = time.perf_counter()
    for step in range(a.steps):
        starts = torch.randint(0, len(data) - a.seq - 1, (a.batch,))
        win = torch.stack([data[s: s + a.seq + 1] for s in starts.tolist()], 1)
        logits, _ = model(win[:-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, len(chars)),
                                                 win[1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
        if step % max(1, a.steps // 10) == 0 or step == a.steps - 1:
            print("step %4d  loss %.4f" % (step, last))
    print("%.1f ms per step" % (1e3 * (time.perf_counter() - t0) / a.steps))
    with torch.no_grad():  # a sampled line, temperature 0.7
        g = torch.Generator().manual_seed(1)
        idx, state, line = torch.tensor([[code["t"]]]), None, "t"
        for _ in range(70):
            logits, state = model(idx, state)
            k = torch.multinomial(torch.softmax(logits[-1, 0] / 0.7, 0), 1, generator=g).item()
            line += chars[k]
            idx = torch.tensor([[k]])
        print("sample: " + line)
    print("loss %.4f -> %.4f" % (first, last))
    if a.check and not last < 0.75 * first:
        print("error: the loss did not fall", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
