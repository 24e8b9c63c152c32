"""The peers of bench/divergence.cpp: the HM-LSTM cell update of the mixed-mode paper, n x n
float32, values and the four Jacobian diagonals (d c'/d c, f, i, g), with the masks z, zb laid out
n x 1 (constant along rows), 1 x n (changing along rows: the paper's layout) or n x n.

    FLUSH (z == 1): c' = sigmoid(i) tanh(g);  COPY (z == 0, zb == 0): c' = c;
    UPDATE (otherwise): c' = sigmoid(f) c + sigmoid(i) tanh(g)

A framework without per-element control flow evaluates every branch and selects (where); the cell
is elementwise, so the VJP with a cotangent of ones is the Jacobian's diagonal.
  torch_eager   PyTorch eager: where-selected branches, autograd.backward(ones)
  jax_jit       JAX: jit of vjp(..)(ones): forward and backward in one XLA computation
Prints CSV rows like the C++ benchmark (benchmark,variant,size,threads,median_ms,mask_layout,
ratio_to_uniform).
  hmlstm.py --framework torch|jax [--quick] [--threads N] [--reps N] [--no-header]
"""
import random
import sys

import common

LAYOUTS = ("n_x_1", "1_x_n", "n_x_n")


def masks(n, layout, seed=5):
    shape = (n, 1) if layout == "n_x_1" else (1, n) if layout == "1_x_n" else (n, n)
    rng = random.Random(seed)
    branch = [rng.randrange(3) for _ in range(shape[0] * shape[1])]  # FLUSH, COPY, UPDATE
    return shape, [1.0 if b == 0 else 0.0 for b in branch], [1.0 if b == 2 else 0.0 for b in branch]


def torch_run(torch, n, layout):
    shape, z, zb = masks(n, layout)
    z = torch.tensor(z).reshape(shape)
    zb = torch.tensor(zb).reshape(shape)
    gen = torch.Generator().manual_seed(5)
    xs = [(torch.rand(n, n, generator=gen) * 4 - 2).requires_grad_() for _ in range(4)]
    ones = torch.ones(n, n)
    flush_mask, copy_mask = z == 1, (z == 0) & (zb == 0)

    def run():
        for x in xs:
            x.grad = None
        c, f, i, g = xs
        flush = torch.sigmoid(i) * torch.tanh(g)
        update = torch.sigmoid(f) * c + flush
        y = torch.where(flush_mask, flush, torch.where(copy_mask, c, update))
        y.backward(ones)
        return y

    return run


def jax_run(jax, n, layout):
    import jax.numpy as jnp

    shape, z, zb = masks(n, layout)
    z = jnp.asarray(z, jnp.float32).reshape(shape)
    zb = jnp.asarray(zb, jnp.float32).reshape(shape)
    keys = jax.random.split(jax.random.PRNGKey(5), 4)
    xs = [jax.random.uniform(k, (n, n), jnp.float32, -2, 2) for k in keys]

    def cell(c, f, i, g):
        flush = jax.nn.sigmoid(i) * jnp.tanh(g)
        update = jax.nn.sigmoid(f) * c + flush
        return jnp.where(z == 1, flush, jnp.where((z == 0) & (zb == 0), c, update))

    @jax.jit
    def values_and_diagonals(xs):
        y, pull = jax.vjp(cell, *xs)
        return y, pull(jnp.ones_like(y))

    def run():
        return jax.block_until_ready(values_and_diagonals(xs))

    return run


def main():
    args = common.parse(__doc__, default_reps=11, quick_reps=3)
    sizes = [512] if args.quick else [512, 1024, 2048]
    variant = "torch_eager" if args.framework == "torch" else "jax_jit"
    mod = common.load(args.framework)
    if not args.no_header:
        print("benchmark,variant,size,threads,median_ms,mask_layout,ratio_to_uniform")
    for n in sizes:
        if mod is None:
            for layout in LAYOUTS:
                print(f"divergence,{args.framework}_missing,{n},{args.threads},nan,{layout},nan")
            continue
        if args.framework == "torch":
            mod.set_num_threads(args.threads)
        make = torch_run if args.framework == "torch" else jax_run
        runs = {layout: make(mod, n, layout) for layout in LAYOUTS}
        for run in runs.values():
            run()  # warm-up (JAX: compiles)
        times = common.interleaved(runs, args.reps)
        uniform = common.median(times["n_x_1"])
        for layout in LAYOUTS:
            ms = common.median(times[layout])
            print(f"divergence,{variant},{n},{args.threads},{ms:.4f},{layout},{ms / uniform:.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
