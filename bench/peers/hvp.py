"""The peers of bench/hvp.cpp (issue 38): a Hessian-vector product against the gradient of the
same MLP loss in its first layer's weights W (n x h), double precision, the same inputs:

    loss(W) = sum(y) + mean(y * y),   y = tanh(tanh(X W + b) W2)

  torch_gradient        PyTorch eager: the loss and autograd backward
  torch_hvp_jvp_grad    functorch.jvp(functorch.grad(loss)) (torch.func in PyTorch >= 2.0;
                        Debian's 1.13 ships it as functorch)
  torch_hvp_autograd    torch.autograd.functional.hvp (double backward)
  jax_gradient          JAX: jit(grad(loss))
  jax_hvp_jvp_grad      jit(jvp(grad(loss))) -- forward over reverse, as JAX's cookbook advises
The same for ADBench's D-LSTM objective (bench/peers/dlstm.py's, l = 2, c = 1024) in its main
weights M, the extra weights constant, direction 0.5 sin(0.37 i + 0.5) (rows hvp_dlstm; PyTorch
with a quarter of the repetitions, as dlstm.py: its eager loop takes seconds).
The variants of one framework run interleaved in each repetition; an H v row carries its paired
ratio to the same framework's gradient (median and quartiles of the per-repetition ratios), like
the C++ rows. Before timing, every H v variant is checked against central differences of the
gradient (a wrong answer stops the script rather than print a time).
  hvp.py --framework torch|jax [--quick] [--threads N] [--reps N] [--no-header]
"""
import math
import sys

import common
import dlstm


def wave(shape, phase):
    """bench/hvp.cpp's inputs: 0.5 sin(0.37 i + phase) over the row-major index i."""
    n = math.prod(shape)
    return [0.5 * math.sin(0.37 * i + phase) for i in range(n)], shape


def inputs(batch, n, h):
    return {"X": wave((batch, n), 0.1), "b": wave((h,), 0.2), "W2": wave((h, 8), 0.3),
            "W": wave((n, h), 0.4), "v": wave((n, h), 0.5)}


def torch_mlp(torch, data):
    t = {k: torch.tensor(vals, dtype=torch.float64).reshape(shape) for k, (vals, shape) in
         data.items()}
    X, b, W2 = t["X"], t["b"], t["W2"]

    def loss(w):
        y = torch.tanh(torch.tanh(X @ w + b) @ W2)
        return y.sum() + (y * y).mean()

    return loss, t["W"], t["v"]


def torch_dlstm(torch, problem):
    objective, M0, E0 = dlstm.torch_objective(torch, *problem)
    vals, shape = wave(tuple(M0.shape), 0.5)
    return (lambda m: objective(m, E0)), M0, torch.tensor(vals, dtype=torch.float64).reshape(shape)


def torch_variants(torch, case):
    loss, W, v = case

    try:
        from torch.func import grad, jvp
    except ImportError:
        from functorch import grad, jvp

    def gradient():
        w = W.detach().requires_grad_()
        loss(w).backward()
        return w.grad

    def hvp_jvp_grad():
        return jvp(grad(loss), (W,), (v,))[1]

    def hvp_autograd():
        return torch.autograd.functional.hvp(loss, W, v)[1]

    def fd_hvp(eps=1e-5):
        g = grad(loss)
        return (g(W + eps * v) - g(W - eps * v)) / (2 * eps)

    ref = fd_hvp()
    for name, f in (("hvp_jvp_grad", hvp_jvp_grad), ("hvp_autograd", hvp_autograd)):
        err = float((f() - ref).abs().max() / ref.abs().max())
        if not err < 1e-6:
            sys.exit(f"hvp.py: torch {name} differs from central differences by {err:.2e}")
    return {"torch_gradient": gradient, "torch_hvp_jvp_grad": hvp_jvp_grad,
            "torch_hvp_autograd": hvp_autograd}


def jax_mlp(jax, data):
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    t = {k: jnp.asarray(np.array(vals, dtype=np.float64).reshape(shape)) for k, (vals, shape) in
         data.items()}
    X, b, W2 = t["X"], t["b"], t["W2"]

    def loss(w):
        y = jnp.tanh(jnp.tanh(X @ w + b) @ W2)
        return y.sum() + (y * y).mean()

    return loss, t["W"], t["v"]


def jax_dlstm(jax, problem):
    import jax.numpy as jnp
    import numpy as np

    objective, M0, E0 = dlstm.jax_objective(jax, *problem)
    vals, shape = wave(tuple(M0.shape), 0.5)
    return (lambda m: objective(m, E0)), M0, jnp.asarray(np.array(vals).reshape(shape))


def jax_variants(jax, case):
    import jax.numpy as jnp

    loss, W, v = case
    g = jax.jit(jax.grad(loss))
    hv = jax.jit(lambda w, d: jax.jvp(jax.grad(loss), (w,), (d,))[1])

    def gradient():
        return g(W).block_until_ready()

    def hvp_jvp_grad():
        return hv(W, v).block_until_ready()

    eps = 1e-5
    ref = (g(W + eps * v) - g(W - eps * v)) / (2 * eps)
    err = float(jnp.abs(hvp_jvp_grad() - ref).max() / jnp.abs(ref).max())
    if not err < 1e-6:
        sys.exit(f"hvp.py: jax jvp(grad) differs from central differences by {err:.2e}")
    return {"jax_gradient": gradient, "jax_hvp_jvp_grad": hvp_jvp_grad}


def main():
    args = common.parse(__doc__, default_reps=21, quick_reps=5)
    sizes = [(64, 32, 32), (256, 64, 64)] + ([] if args.quick else [(1024, 128, 128)])
    mod = common.load(args.framework)
    if not args.no_header:
        print("benchmark,variant,size,threads,median_ms,paired_ratio,paired_ratio_q1,"
              "paired_ratio_q3")
    if mod is None:
        for bench, size in [("hvp_mlp", "x".join(map(str, s))) for s in sizes] + [
                ("hvp_dlstm", "l2_c1024")]:
            print(f"{bench},{args.framework}_missing,{size},{args.threads},nan,nan,nan,nan")
        return
    if args.framework == "torch":
        mod.set_num_threads(args.threads)
    torch_like = args.framework == "torch"
    make = torch_variants if torch_like else jax_variants
    mlp = torch_mlp if torch_like else jax_mlp
    cases = [("hvp_mlp", "x".join(map(str, s)), lambda s=s: mlp(mod, inputs(*s)), args.reps)
             for s in sizes]
    problem = dlstm.read(dlstm.DATA / "lstm_l2_c1024.txt")
    cases.append(("hvp_dlstm", "l2_c1024",
                  lambda: (torch_dlstm if torch_like else jax_dlstm)(mod, problem),
                  max(1, args.reps // 4) if torch_like else args.reps))
    for bench, size, case, reps in cases:
        runs = make(mod, case())
        for f in runs.values():
            f()  # JAX compiles here; both warm their allocators
        times = common.interleaved(runs, reps)
        base = times[f"{args.framework}_gradient"]
        for name, ts in times.items():
            if name.endswith("_gradient"):
                print(f"{bench},{name},{size},{args.threads},{common.median(ts):.4f},,,")
                continue
            q = [a / b for a, b in zip(ts, base)]
            print(f"{bench},{name},{size},{args.threads},{common.median(ts):.4f},"
                  f"{common.median(q):.3f},{common.quantile(q, 0.25):.3f},"
                  f"{common.quantile(q, 0.75):.3f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
