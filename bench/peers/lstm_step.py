"""The peers of bench/lstm_step.cpp: one LSTM cell step with its gate matmuls, forward + backward
into Wx, Wh, b, h, c from given cotangents of (h2, c2), float32, B = 256, input 512, hidden 1024
(--quick: 64 x 128 x 256).

  torch_eager     the same operations: x @ Wx + h @ Wh + b, chunk, the cell, autograd.backward
  torch_lstmcell  torch.nn.LSTMCell (its weights in the same layout, transposed)
  jax_jit         jit of vjp over the same operations
Prints CSV rows benchmark,variant,size,threads,median_ms (the C++ benchmark's further columns
empty).
  lstm_step.py --framework torch|jax [--quick] [--threads N] [--reps N] [--no-header]
"""
import sys

import common


def torch_runs(torch, B, I, H):
    g = torch.Generator().manual_seed(4)

    def r(*shape, scale=1.0, grad=True):
        t = (torch.rand(*shape, generator=g) * 2 - 1) * scale
        return t.requires_grad_() if grad else t

    x = r(B, I, grad=False)
    h, c = r(B, H), r(B, H)
    Wx, Wh, b = r(I, 4 * H, scale=0.05), r(H, 4 * H, scale=0.05), r(4 * H, scale=0.1)
    dh, dc2 = r(B, H, grad=False), r(B, H, grad=False)

    def same_ops():
        for t in (h, c, Wx, Wh, b):
            t.grad = None
        i, f, gg, o = (x @ Wx + h @ Wh + b).chunk(4, 1)
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        h2 = torch.sigmoid(o) * torch.tanh(c2)
        torch.autograd.backward([h2, c2], [dh, dc2])

    cell = torch.nn.LSTMCell(I, H)

    def lstmcell():
        cell.zero_grad(set_to_none=True)
        h.grad = c.grad = None
        h2, c2 = cell(x, (h, c))
        torch.autograd.backward([h2, c2], [dh, dc2])

    return {"torch_eager": same_ops, "torch_lstmcell": lstmcell}


def jax_runs(jax, B, I, H):
    import jax.numpy as jnp

    k = jax.random.split(jax.random.PRNGKey(4), 8)
    u = lambda key, shape, s=1.0: jax.random.uniform(key, shape, jnp.float32, -s, s)
    x, h, c = u(k[0], (B, I)), u(k[1], (B, H)), u(k[2], (B, H))
    Wx, Wh, b = u(k[3], (I, 4 * H), 0.05), u(k[4], (H, 4 * H), 0.05), u(k[5], (4 * H,), 0.1)
    dh, dc2 = u(k[6], (B, H)), u(k[7], (B, H))

    def step(Wx, Wh, b, h, c):
        i, f, gg, o = jnp.split(x @ Wx + h @ Wh + b, 4, axis=1)
        c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
        return jax.nn.sigmoid(o) * jnp.tanh(c2), c2

    @jax.jit
    def fwd_bwd(args, cot):
        outs, pull = jax.vjp(step, *args)
        return outs, pull(cot)

    def run():
        jax.block_until_ready(fwd_bwd((Wx, Wh, b, h, c), (dh, dc2)))

    return {"jax_jit": run}


def main():
    args = common.parse(__doc__, default_reps=31, quick_reps=5)
    B, I, H = (64, 128, 256) if args.quick else (256, 512, 1024)
    size = f"{B}x{I}x{H}"
    mod = common.load(args.framework)
    if not args.no_header:
        print("benchmark,variant,size,threads,median_ms,tape_bytes,median_saving_vs_unfused_ms,"
              "faster_than_unfused,sign_test_p,blas")
    if mod is None:
        print(f"lstm_step,{args.framework}_missing,{size},{args.threads},nan,,,,,")
        return
    if args.framework == "torch":
        mod.set_num_threads(args.threads)
    runs = (torch_runs if args.framework == "torch" else jax_runs)(mod, B, I, H)
    for run in runs.values():
        run()  # warm-up (JAX: compiles)
    times = common.interleaved(runs, args.reps)
    for v, t in times.items():
        print(f"lstm_step,{v},{size},{args.threads},{common.median(t):.3f},,,,,")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
