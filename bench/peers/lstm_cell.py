"""The peers of bench/lstm_cell.cpp: the LSTM cell update forward + backward (the input
cotangents for given output cotangents), float32, over the same B x H sizes.

    c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c2)

  torch_eager   PyTorch eager: the five operations and autograd.backward
  jax_jit       JAX: jit(vjp) -- forward and backward of the cell in one XLA computation
Prints CSV rows like the C++ benchmark (benchmark,variant,size,threads,median_ms,melem_per_s,
gb_per_s,added_mib); gb_per_s counts the 19 arrays a fused forward + VJP must move.
  lstm_cell.py --framework torch|jax [--quick] [--threads N] [--reps N] [--no-header]
"""
import sys

import common


def torch_run(torch, b, h):
    gen = torch.Generator().manual_seed(42)
    xs = [(torch.rand(b, h, generator=gen) * 4 - 2).requires_grad_() for _ in range(5)]
    hbar = torch.rand(b, h, generator=gen) * 4 - 2
    c2bar = torch.rand(b, h, generator=gen) * 4 - 2

    def run():
        for x in xs:
            x.grad = None
        i, f, g, o, c = xs
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        hh = torch.sigmoid(o) * torch.tanh(c2)
        torch.autograd.backward([hh, c2], [hbar, c2bar])
        return xs[0].grad

    return run


def jax_run(jax, b, h):
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(42), 7)
    xs = [jax.random.uniform(k, (b, h), jnp.float32, -2, 2) for k in keys[:5]]
    hbar, c2bar = (jax.random.uniform(k, (b, h), jnp.float32, -2, 2) for k in keys[5:])

    def cell(i, f, g, o, c):
        c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c2), c2

    @jax.jit
    def fwd_bwd(xs, cot):
        outs, pull = jax.vjp(cell, *xs)
        return outs, pull(cot)

    def run():
        outs, grads = fwd_bwd(xs, (hbar, c2bar))
        jax.block_until_ready((outs, grads))
        return grads

    return run


def main():
    args = common.parse(__doc__, default_reps=11, quick_reps=3)
    sizes = [(256, 256)] if args.quick else [(256, 256), (512, 512), (1024, 1024), (2048, 1024),
                                             (4096, 1024)]
    variant = "torch_eager" if args.framework == "torch" else "jax_jit"
    mod = common.load(args.framework)
    if not args.no_header and args.memory is None:
        print("benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s,added_mib")
    if mod is None:
        for b, h in sizes:
            print(f"lstm_cell,{args.framework}_missing,{b}x{h},{args.threads},nan,nan,nan,nan")
        return
    if args.framework == "torch":
        mod.set_num_threads(args.threads)
    make = torch_run if args.framework == "torch" else jax_run
    if args.memory is not None:
        b, h = (int(x) for x in args.size.split("x"))
        run = make(mod, b, h)
        if args.framework == "jax":
            run()  # compiles; a second cold run allocates like the first
        probe = common.MemoryProbe()
        run()
        print(f"{probe.added_mib():.1f}")
        return
    for b, h in sizes:
        n = b * h
        mib = common.memory_in_fresh_process(args, variant, f"{b}x{h}")
        run = make(mod, b, h)
        run()
        ms = common.median(common.interleaved({variant: run}, args.reps)[variant])
        print(f"lstm_cell,{variant},{b}x{h},{args.threads},{ms:.3f},{n / ms / 1e3:.1f},"
              f"{19 * 4 * n / ms / 1e6:.2f},{mib:.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
