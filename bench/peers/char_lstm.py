"""The peers of bench/char_lstm_step.cpp: one training step (forward over the window, backward,
Adam) of the headline demo's character-level LSTM (examples/models/char_lstm.hpp), float32.

  torch_eager     the same operations as dualcast's model, PyTorch eager, torch.optim.Adam
  torch_lstmcell  torch.nn.LSTMCell on one-hot characters (the same model: x W_ih^T picks the
                  character's row), PyTorch eager
  jax_jit         the model as one lax.scan, value_and_grad and an Adam update in ONE jit

The text is read from the C++ header (one source of truth). Prints CSV rows like the C++
benchmark (benchmark,variant,size,threads,median_ms,p10_ms,p90_ms,added_mib,...).
  char_lstm.py --framework torch|jax [--quick] [--threads N] [--reps N] [--no-header]
"""
import pathlib
import random
import re
import sys

import common

HEADER = pathlib.Path(__file__).resolve().parents[2] / "examples" / "models" / "char_lstm.hpp"


def corpus():
    text = HEADER.read_text()
    body = text[text.index("corpus ="): text.index(";", text.index("corpus ="))]
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body))


def batch(text, vocab, b, seq, seed=1):
    rng = random.Random(seed)
    starts = [rng.randrange(0, len(text) - seq - 2) for _ in range(b)]
    ids = {ch: k for k, ch in enumerate(vocab)}
    inputs = [[ids[text[s + t]] for s in starts] for t in range(seq)]
    targets = [ids[text[s + t + 1]] for t in range(seq) for s in starts]
    return inputs, targets


def torch_steps(torch, v, b, h, seq, inputs, targets):
    g = torch.Generator().manual_seed(42)
    wx = (torch.randn(v, 4 * h, generator=g) * 0.1).requires_grad_()
    lim = (6.0 / (h + 4 * h)) ** 0.5
    wh = ((torch.rand(h, 4 * h, generator=g) * 2 - 1) * lim).requires_grad_()
    bias = torch.zeros(4 * h)
    bias[h: 2 * h] = 1.0
    bias.requires_grad_()
    lim = (6.0 / (h + v)) ** 0.5
    wy = ((torch.rand(h, v, generator=g) * 2 - 1) * lim).requires_grad_()
    by = torch.zeros(v, requires_grad=True)
    idx = [torch.tensor(row) for row in inputs]
    tgt = torch.tensor(targets).unsqueeze(1)
    opt = torch.optim.Adam([wx, wh, bias, wy, by], lr=1e-3)

    def same_ops():
        hh = torch.zeros(b, h)
        c = torch.zeros(b, h)
        hs = []
        for t in range(seq):
            gates = wx.index_select(0, idx[t]) + hh @ wh + bias
            i, f, gg, o = gates.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
            hh = torch.sigmoid(o) * torch.tanh(c)
            hs.append(hh)
        logp = torch.log_softmax(torch.cat(hs) @ wy + by, 1)
        loss = -logp.gather(1, tgt).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    cell = torch.nn.LSTMCell(v, h)
    head = torch.nn.Linear(h, v)
    onehot = [torch.nn.functional.one_hot(i, v).float() for i in idx]
    opt2 = torch.optim.Adam(list(cell.parameters()) + list(head.parameters()), lr=1e-3)

    def lstmcell():
        hh = torch.zeros(b, h)
        c = torch.zeros(b, h)
        hs = []
        for t in range(seq):
            hh, c = cell(onehot[t], (hh, c))
            hs.append(hh)
        logp = torch.log_softmax(head(torch.cat(hs)), 1)
        loss = -logp.gather(1, tgt).mean()
        opt2.zero_grad(set_to_none=True)
        loss.backward()
        opt2.step()
        return loss.item()

    return {"torch_eager": same_ops, "torch_lstmcell": lstmcell}


def jax_steps(jax, v, b, h, seq, inputs, targets):
    import jax.numpy as jnp

    k = jax.random.split(jax.random.PRNGKey(42), 3)
    lim_h, lim_y = (6.0 / (5 * h)) ** 0.5, (6.0 / (h + v)) ** 0.5
    params = {
        "wx": jax.random.normal(k[0], (v, 4 * h), jnp.float32) * 0.1,
        "wh": jax.random.uniform(k[1], (h, 4 * h), jnp.float32, -lim_h, lim_h),
        "b": jnp.zeros(4 * h, jnp.float32).at[h: 2 * h].set(1.0),
        "wy": jax.random.uniform(k[2], (h, v), jnp.float32, -lim_y, lim_y),
        "by": jnp.zeros(v, jnp.float32),
    }
    xs = jnp.asarray(inputs, jnp.int32)  # (seq, b)
    ys = jnp.asarray(targets, jnp.int32)

    def loss_fn(p):
        def cell(carry, x):
            hh, c = carry
            gates = p["wx"][x] + hh @ p["wh"] + p["b"]
            i, f, gg, o = jnp.split(gates, 4, axis=1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
            hh = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (hh, c), hh

        zeros = jnp.zeros((b, h), jnp.float32)
        _, hs = jax.lax.scan(cell, (zeros, zeros), xs)
        logp = jax.nn.log_softmax(hs.reshape(seq * b, h) @ p["wy"] + p["by"], axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, ys[:, None], axis=1))

    def train_step(p, m, s, t):
        loss, g = jax.value_and_grad(loss_fn)(p)
        lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
        m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        s = jax.tree_util.tree_map(lambda s_, g_: b2 * s_ + (1 - b2) * g_ * g_, s, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(
            lambda p_, m_, s_: p_ - lr * (m_ / c1) / (jnp.sqrt(s_ / c2) + eps), p, m, s)
        return p, m, s, loss

    step = jax.jit(train_step, donate_argnums=(0, 1, 2))
    state = {"p": params, "m": jax.tree_util.tree_map(jnp.zeros_like, params),
             "s": jax.tree_util.tree_map(jnp.zeros_like, params), "t": 0}

    def run():
        state["t"] += 1
        state["p"], state["m"], state["s"], loss = step(state["p"], state["m"], state["s"],
                                                        jnp.float32(state["t"]))
        return float(loss)  # waits for the result

    return {"jax_jit": run}


def main():
    args = common.parse(__doc__, default_reps=21, quick_reps=3)
    b, h, seq = (16, 64, 8) if args.quick else (64, 512, 32)
    size = f"{b}x{h}x{seq}"
    text = corpus()
    vocab = sorted(set(text))
    inputs, targets = batch(text, vocab, b, seq)
    mod = common.load(args.framework)
    variants = ["torch_eager", "torch_lstmcell"] if args.framework == "torch" else ["jax_jit"]
    if not args.no_header and args.memory is None:
        print("benchmark,variant,size,threads,median_ms,p10_ms,p90_ms,added_mib,"
              "saving_vs_unfused_ms,wins,sign_test_p")
    if mod is None:
        for v in variants:
            print(f"char_lstm_step,{args.framework}_missing,{size},{args.threads},nan,nan,nan,nan,-,-,-")
        return
    if args.framework == "torch":
        mod.set_num_threads(args.threads)
    make = torch_steps if args.framework == "torch" else jax_steps
    runs = make(mod, len(vocab), b, h, seq, inputs, targets)
    if args.memory is not None:
        if args.framework == "jax":
            runs[args.memory]()  # the first call compiles: not part of a step's memory
        probe = common.MemoryProbe()
        runs[args.memory]()
        print(f"{probe.added_mib():.1f}")
        return
    mib = {v: common.memory_in_fresh_process(args, v, size) for v in variants}
    first = {v: runs[v]() for v in variants}  # warm-up (and JAX's compilation)
    second = {v: runs[v]() for v in variants}
    for v in variants:
        if not second[v] < first[v] + 1e-3:
            sys.exit(f"char_lstm.py: {v}: the loss did not fall ({first[v]} -> {second[v]})")
    times = common.interleaved(runs, args.reps)
    for v in variants:
        t = times[v]
        print(f"char_lstm_step,{v},{size},{args.threads},{common.median(t):.3f},"
              f"{common.quantile(t, 0.1):.3f},{common.quantile(t, 0.9):.3f},{mib[v]:.1f},-,-,-")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
