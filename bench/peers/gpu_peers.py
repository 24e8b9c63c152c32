"""The peers of bench/gpu_cells.cu on a GPU (float32, CUDA): the same updates, sizes and CSV columns.

  lstm_cell   forward + backward from (hbar, c2bar), B x 1024
  hmlstm      the HM-LSTM update n x n, values and the four Jacobian diagonals (a VJP of ones over
              the where-selected branches, as the CPU peers do), masks n x 1 / 1 x n / n x n
  lstm_step   gates = x @ Wx + h @ Wh + b, the cell, backward into Wx, Wh, b, h, c
Variants: torch_eager (PyTorch eager + autograd, timed with CUDA events), torch_compile and
torch_compile_max_autotune (the same forward compiled by torch.compile, mode "default" /
"max-autotune", backward by autograd through the compiled graph: Inductor's generated forward
and backward kernels; torch >= 2 only; the first call compiles and is timed apart, in the note
column as compile_s) and jax_jit (one jit of forward and vjp, timed to block_until_ready).
dualcast_torch / dualcast_jax (lstm_cell; issue 35): dualcast's LSTM cell as a PyTorch operation
(dualcast.torch.lstm_cell, forward + autograd's backward, which calls the fused VJP) and as a JAX
operation (dualcast.jax.lstm_cell under one jit of forward and vjp); left out, with a line on
stderr, where the package's cells library (DUALCAST_TORCH_CELLS / DUALCAST_JAX_CELLS) is not
built with its CUDA half.
  lstm_cell_16  the LSTM cell with every array in bfloat16 (issue 37): torch_eager,
              torch_compile(s), torch_fused_lstmcell (PyTorch's own fused CUDA cell,
              torch._thnn_fused_lstm_cell, as nn.LSTMCell under autocast runs it: it reads the
              input and the hidden gates, B x 4H each, and sums them) and jax_jit; gb_per_s
              counts 19 arrays of 2 bytes.
gb_per_s counts the bytes a fused kernel must move (the C++ benchmark's count), not what the
framework moves.
  gpu_peers.py --framework torch|jax [--reps N] [--quick] [--no-header]
               [--compile none|default|max-autotune|all] [--device cuda|cpu]
(--device cpu runs the torch variants on the CPU, to try this script where there is no GPU.)
"""
import argparse
import os
import statistics
import sys
import time

from hmlstm import LAYOUTS, masks  # the CPU peers' masks: same layouts, same seed


def row(bench, variant, size, ms, nbytes, note=""):
    gbs = nbytes / ms / 1e6 if nbytes and ms > 0 else 0.0
    print(f"{bench},{variant},{size},{ms:.4f},{gbs:.1f},{note}")
    sys.stdout.flush()


def timed_torch(torch, fns, reps):
    """Medians (ms) of each function, interleaved, with CUDA events after one warm-up each (on
    the CPU: the wall clock)."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    for f in fns:
        f()
    if cuda:
        torch.cuda.synchronize()
    times = [[] for _ in fns]
    for _ in range(reps):
        for k, f in enumerate(fns):
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                f()
                b.record()
                b.synchronize()
                times[k].append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                f()
                times[k].append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]


def torch_variants(torch, args, fwd):
    """(name, forward, compile seconds) per variant asked for: eager, then torch.compile's
    modes. The compiled ones are compiled here, by a first call of run_with(forward)."""
    out = [("torch_eager", fwd)]
    modes = {"none": [], "default": ["default"], "max-autotune": ["max-autotune"],
             "all": ["default", "max-autotune"]}[args.compile]
    if modes and not hasattr(torch, "compile"):
        print(f"torch {torch.__version__} has no torch.compile: its variants left out",
              file=sys.stderr)
        modes = []
    for mode in modes:
        name = "torch_compile" if mode == "default" else "torch_compile_max_autotune"
        out.append((name, torch.compile(fwd, mode=mode, dynamic=False)))
    return out


def run_variants(torch, args, bench, size, nbytes, note, fwd, run_with, extra=()):
    """Times run_with(forward) for every variant, and run(forward) for the (name, forward, run)
    triples of `extra` (run None: run_with), interleaved; one CSV row each. The first call of
    each is untimed (torch.compile's variants compile there: compile_s in the note)."""
    variants = [(name, f, run_with) for name, f in torch_variants(torch, args, fwd)]
    variants += [(name, f, run or run_with) for name, f, run in extra]
    notes = []
    for name, f, run in variants:
        t0 = time.perf_counter()
        run(f)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        notes.append(f"compile_s={secs:.1f}" if name.startswith("torch_compile") else "")
    times = timed_torch(torch, [lambda f=f, run=run: run(f) for _, f, run in variants], args.reps)
    for (name, _, _), ms, extra in zip(variants, times, notes):
        row(bench, name, size, ms, nbytes, " ".join(x for x in (note, extra) if x))


def timed_jax(jax, fns, reps):
    for f in fns:
        jax.block_until_ready(f())  # compiles
    times = [[] for _ in fns]
    for _ in range(reps):
        for k, f in enumerate(fns):
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            times[k].append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]


def torch_main(args, batches, hm_sizes, step_sizes, batches16):
    import torch

    dev = torch.device(args.device)
    gen = torch.Generator(device=dev).manual_seed(42)

    def rnd(*shape, scale=2.0, grad=False):
        t = (torch.rand(*shape, generator=gen, device=dev) * 2 - 1) * scale
        return t.requires_grad_() if grad else t

    def cell(i, f, g, o, c):
        c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c2), c2

    for b in batches:
        h = 1024
        xs = [rnd(b, h, grad=True) for _ in range(5)]
        hbar, c2bar = rnd(b, h), rnd(b, h)

        def run(fwd):
            for x in xs:
                x.grad = None
            hh, c2 = fwd(*xs)
            torch.autograd.backward([hh, c2], [hbar, c2bar])

        run_variants(torch, args, "lstm_cell", f"{b}x{h}", 19 * 4 * b * h, "", cell, run,
                     dualcast_torch_variants(torch, xs))
        del xs, hbar, c2bar
    for b in batches16:
        h = 1024
        xs = [rnd(b, h, grad=True).to(torch.bfloat16).detach().requires_grad_() for _ in range(5)]
        hbar, c2bar = rnd(b, h).to(torch.bfloat16), rnd(b, h).to(torch.bfloat16)

        def run(fwd, xs=xs, hbar=hbar, c2bar=c2bar):
            for x in xs:
                x.grad = None
            hh, c2 = fwd(*xs)
            torch.autograd.backward([hh, c2], [hbar, c2bar])

        extra = []
        if dev.type == "cuda":
            # PyTorch's fused cell takes the gates as one B x 4H block (i, f, g, o) plus the
            # hidden gates; here the hidden gates are zeros and the input gates the four inputs.
            igates = torch.cat(xs[:4], dim=1).detach().requires_grad_()
            hgates = torch.zeros_like(igates)
            cx = xs[4]

            def fused_cell(igates=igates, hgates=hgates, cx=cx):
                hy, cy, _ = torch._thnn_fused_lstm_cell(igates, hgates, cx)
                return hy, cy

            def run_fused(fwd, igates=igates, cx=cx, hbar=hbar, c2bar=c2bar):
                igates.grad = None
                cx.grad = None
                hh, c2 = fwd()
                torch.autograd.backward([hh, c2], [hbar, c2bar])

            extra.append(("torch_fused_lstmcell", fused_cell, run_fused))
        run_variants(torch, args, "lstm_cell_16", f"{b}x{h}", 19 * 2 * b * h, "bfloat16", cell,
                     run, extra)
        del xs, hbar, c2bar, extra
    for n in hm_sizes:
        for layout in LAYOUTS:
            shape, z, zb = masks(n, layout)
            z = torch.tensor(z, device=dev).reshape(shape)
            zb = torch.tensor(zb, device=dev).reshape(shape)
            xs = [rnd(n, n, grad=True) for _ in range(4)]
            ones = torch.ones(n, n, device=dev)
            flush_mask, copy_mask = z == 1, (z == 0) & (zb == 0)

            def hm(c, f, i, g, flush_mask, copy_mask):
                flush = torch.sigmoid(i) * torch.tanh(g)
                update = torch.sigmoid(f) * c + flush
                return torch.where(flush_mask, flush, torch.where(copy_mask, c, update))

            def run(fwd, flush_mask=flush_mask, copy_mask=copy_mask):
                for x in xs:
                    x.grad = None
                fwd(*xs, flush_mask, copy_mask).backward(ones)

            run_variants(torch, args, "hmlstm", str(n),
                         36 * n * n + (8 * n * n if layout == "n_x_n" else 0), layout, hm, run)
    for bb, ii, hh in step_sizes:
        x = rnd(bb, ii, scale=1.0)
        hs = rnd(bb, hh, scale=1.0, grad=True)
        c = rnd(bb, hh, scale=1.0, grad=True)
        wx = rnd(ii, 4 * hh, scale=0.05, grad=True)
        wh = rnd(hh, 4 * hh, scale=0.05, grad=True)
        bias = rnd(4 * hh, scale=0.1, grad=True)
        dh, dc2 = rnd(bb, hh, scale=1.0), rnd(bb, hh, scale=1.0)
        params = [hs, c, wx, wh, bias]

        def step(x, hs, c, wx, wh, bias):
            gates = x @ wx + hs @ wh + bias
            i, f, g, o = gates.chunk(4, dim=1)
            c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c2), c2

        def run(fwd, x=x, params=params, dh=dh, dc2=dc2):
            for p in params:
                p.grad = None
            h2, c2 = fwd(x, *params)
            torch.autograd.backward([h2, c2], [dh, dc2])

        run_variants(torch, args, "lstm_step", f"{bb}x{ii}x{hh}", 0,
                     f"tf32={torch.backends.cuda.matmul.allow_tf32}", step, run)


def dualcast_torch_variants(torch, xs):
    """[("dualcast_torch", dualcast.torch.lstm_cell, None)] where it runs on xs' device, else
    [] (run_variants' extra)."""
    try:
        import dualcast.torch as dct

        dct.lstm_cell(*[x.detach() for x in xs])
    except Exception as e:  # noqa: BLE001 -- reported, the variant left out
        print(f"dualcast_torch left out: {type(e).__name__}: {e}", file=sys.stderr)
        return []
    return [("dualcast_torch", dct.lstm_cell, None)]


def jax_main(args, batches, hm_sizes, step_sizes, batches16):
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(42)

    def rnd(shape, scale=2.0):
        nonlocal key
        key, k = jax.random.split(key)
        return jax.random.uniform(k, shape, jnp.float32, -scale, scale)

    def cell(i, f, g, o, c):
        c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c2), c2

    @jax.jit
    def cell_fwd_bwd(xs, cot):
        outs, pull = jax.vjp(cell, *xs)
        return outs, pull(cot)

    dualcast_fwd_bwd = None
    if batches:
        try:
            import dualcast.jax as dj

            @jax.jit
            def dualcast_fwd_bwd(xs, cot):
                outs, pull = jax.vjp(dj.lstm_cell, *xs)
                return outs, pull(cot)

            probe = [jnp.ones((8, 8), jnp.float32)] * 5
            jax.block_until_ready(dualcast_fwd_bwd(probe, (probe[0], probe[0])))
        except Exception as e:  # noqa: BLE001 -- reported, the variant left out
            print(f"dualcast_jax left out: {type(e).__name__}: {e}", file=sys.stderr)
            dualcast_fwd_bwd = None

    for b in batches:
        h = 1024
        xs = [rnd((b, h)) for _ in range(5)]
        cot = (rnd((b, h)), rnd((b, h)))
        fns = [lambda: cell_fwd_bwd(xs, cot)]
        if dualcast_fwd_bwd is not None:
            fns.append(lambda: dualcast_fwd_bwd(xs, cot))
        ms = timed_jax(jax, fns, args.reps)
        row("lstm_cell", "jax_jit", f"{b}x{h}", ms[0], 19 * 4 * b * h)
        if dualcast_fwd_bwd is not None:
            row("lstm_cell", "dualcast_jax", f"{b}x{h}", ms[1], 19 * 4 * b * h)
        del xs, cot, fns
    for b in batches16:
        h = 1024
        xs = [rnd((b, h)).astype(jnp.bfloat16) for _ in range(5)]
        cot = (rnd((b, h)).astype(jnp.bfloat16), rnd((b, h)).astype(jnp.bfloat16))
        (ms,) = timed_jax(jax, [lambda: cell_fwd_bwd(xs, cot)], args.reps)
        row("lstm_cell_16", "jax_jit", f"{b}x{h}", ms, 19 * 2 * b * h, "bfloat16")
        del xs, cot
    for n in hm_sizes:
        for layout in LAYOUTS:
            shape, z, zb = masks(n, layout)
            z = jnp.asarray(z, jnp.float32).reshape(shape)
            zb = jnp.asarray(zb, jnp.float32).reshape(shape)
            xs = [rnd((n, n)) for _ in range(4)]

            def hm(c, f, i, g, z=z, zb=zb):
                flush = jax.nn.sigmoid(i) * jnp.tanh(g)
                update = jax.nn.sigmoid(f) * c + flush
                return jnp.where(z == 1, flush, jnp.where((z == 0) & (zb == 0), c, update))

            @jax.jit
            def values_and_diagonals(xs, hm=hm):
                y, pull = jax.vjp(hm, *xs)
                return y, pull(jnp.ones_like(y))

            (ms,) = timed_jax(jax, [lambda: values_and_diagonals(xs)], args.reps)
            row("hmlstm", "jax_jit", str(n), ms, 36 * n * n + (8 * n * n if layout == "n_x_n" else 0),
                layout)
    for bb, ii, hh in step_sizes:
        x = rnd((bb, ii), 1.0)
        params = (rnd((bb, hh), 1.0), rnd((bb, hh), 1.0), rnd((ii, 4 * hh), 0.05),
                  rnd((hh, 4 * hh), 0.05), rnd((4 * hh,), 0.1))
        cot = (rnd((bb, hh), 1.0), rnd((bb, hh), 1.0))

        def step(hs, c, wx, wh, bias, x=x):
            gates = x @ wx + hs @ wh + bias
            i, f, g, o = jnp.split(gates, 4, axis=1)
            return cell(i, f, g, o, c)

        @jax.jit
        def step_fwd_bwd(params, cot, step=step):
            outs, pull = jax.vjp(step, *params)
            return outs, pull(cot)

        (ms,) = timed_jax(jax, [lambda: step_fwd_bwd(params, cot)], args.reps)
        row("lstm_step", "jax_jit", f"{bb}x{ii}x{hh}", ms, 0,
            f"precision={jax.config.jax_default_matmul_precision}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--framework", choices=["torch", "jax"], required=True)
    ap.add_argument("--reps", type=int, default=31)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-header", action="store_true")
    ap.add_argument("--compile", choices=["none", "default", "max-autotune", "all"],
                    default="none", help="torch.compile variants beside eager (torch >= 2)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="where the torch variants run (cpu: to try the script without a GPU)")
    ap.add_argument("--only", type=lambda v: v.split(","),
                    help="run these benchmarks only, comma-separated: lstm_cell, lstm_cell_16, "
                         "hmlstm, lstm_step (JAX's compilations of all of them took over 150 s)")
    args = ap.parse_args()
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    batches = [4096] if args.quick else [4096, 16384, 65536]
    hm_sizes = [512] if args.quick else [512, 1024, 2048, 8192]
    step_sizes = [(64, 128, 256)] if args.quick else [(256, 512, 1024), (4096, 1024, 1024)]
    batches16 = list(batches)
    if args.only:
        unknown = set(args.only) - {"lstm_cell", "lstm_cell_16", "hmlstm", "lstm_step"}
        if unknown:
            ap.error(f"--only: unknown benchmark(s) {', '.join(sorted(unknown))}")
        batches16 = batches16 if "lstm_cell_16" in args.only else []
        batches = batches if "lstm_cell" in args.only else []
        hm_sizes = hm_sizes if "hmlstm" in args.only else []
        step_sizes = step_sizes if "lstm_step" in args.only else []
    if not args.no_header:
        print("benchmark,variant,size,median_ms,gb_per_s,note")
    (torch_main if args.framework == "torch" else jax_main)(args, batches, hm_sizes, step_sizes,
                                                            batches16)


if __name__ == "__main__":
    main()
