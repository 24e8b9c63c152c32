"""The peers of the D-LSTM rows of bench/tape_overhead.cpp: ADBench's diagonal LSTM objective and
its gradient (examples/models/dlstm.hpp, ../shared/notes/adbench-dlstm.md) on ADBench's data
(data/adbench-lstm/lstm_l{2,4}_c1024.txt), float64 like ADBench.

  torch_objective / torch_gradient   PyTorch eager: the layer-steps as tensor operations on b-vectors
  jax_objective / jax_gradient       JAX: the steps as one lax.scan, jit (grad: jit(value_and_grad))
Prints CSV rows like the C++ benchmark (benchmark,variant,size,threads,median_ms,us_per_node,
nodes,ratio_to_plain; the last three empty).
  dlstm.py --framework torch|jax [--quick] [--threads N] [--reps N] [--no-header]
"""
import pathlib
import sys

import common

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "adbench-lstm"


def read(path):
    nums = path.read_text().split()
    l, c, b = (int(x) for x in nums[:3])
    vals = [float(x) for x in nums[3:]]
    k = 0

    def take(n):
        nonlocal k
        k += n
        return vals[k - n: k]

    main = take(2 * l * 4 * b)
    extra = take(3 * b)
    state = take(2 * l * b)
    seq = take(c * b)
    return l, c, b, main, extra, state, seq


def torch_objective(torch, l, c, b, main, extra, state, seq):
    """The objective of (M, E) and the problem's M0, E0 (also used by hvp.py)."""
    M0 = torch.tensor(main, dtype=torch.float64).reshape(2 * l, 4 * b)
    E0 = torch.tensor(extra, dtype=torch.float64).reshape(3, b)
    S0 = torch.tensor(state, dtype=torch.float64).reshape(2 * l, b)
    X = torch.tensor(seq, dtype=torch.float64).reshape(c, b)

    def objective(M, E):
        h = [S0[2 * k] for k in range(l)]
        s = [S0[2 * k + 1] for k in range(l)]
        total = 0
        for t in range(c - 1):
            x = X[t] * E[0]
            for k in range(l):
                w, bias = M[2 * k], M[2 * k + 1]
                f = torch.sigmoid(x * w[:b] + bias[:b])
                i = torch.sigmoid(h[k] * w[b:2 * b] + bias[b:2 * b])
                o = torch.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
                g = torch.tanh(h[k] * w[3 * b:] + bias[3 * b:])
                s[k] = s[k] * f + i * g
                h[k] = o * torch.tanh(s[k])
                x = h[k]
            y = x * E[1] + E[2]
            total = total + (X[t + 1] * (y - torch.log(torch.exp(y).sum() + 2))).sum()
        return -total / ((c - 1) * b)

    return objective, M0, E0


def torch_fns(torch, *problem):
    objective, M0, E0 = torch_objective(torch, *problem)

    def obj():
        with torch.no_grad():
            return float(objective(M0, E0))

    def grad():
        M = M0.clone().requires_grad_()
        E = E0.clone().requires_grad_()
        loss = objective(M, E)
        loss.backward()
        return float(M.grad[0, 0])

    return {"torch_objective": obj, "torch_gradient": grad}


def jax_objective(jax, l, c, b, main, extra, state, seq):
    """The objective of (M, E) and the problem's M0, E0 (also used by hvp.py)."""
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    M0 = jnp.asarray(main, jnp.float64).reshape(2 * l, 4 * b)
    E0 = jnp.asarray(extra, jnp.float64).reshape(3, b)
    S0 = jnp.asarray(state, jnp.float64).reshape(2 * l, b)
    X = jnp.asarray(seq, jnp.float64).reshape(c, b)

    def objective(M, E):
        def step(carry, xs):
            h, s = carry
            xt, xnext = xs
            x = xt * E[0]
            hs, ss = [], []
            for k in range(l):
                w, bias = M[2 * k], M[2 * k + 1]
                f = jax.nn.sigmoid(x * w[:b] + bias[:b])
                i = jax.nn.sigmoid(h[k] * w[b:2 * b] + bias[b:2 * b])
                o = jax.nn.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
                g = jnp.tanh(h[k] * w[3 * b:] + bias[3 * b:])
                sk = s[k] * f + i * g
                x = o * jnp.tanh(sk)
                hs.append(x)
                ss.append(sk)
            y = x * E[1] + E[2]
            return (jnp.stack(hs), jnp.stack(ss)), jnp.sum(xnext * (y - jnp.log(jnp.sum(jnp.exp(y)) + 2)))

        init = (S0[0::2], S0[1::2])
        _, terms = jax.lax.scan(step, init, (X[:-1], X[1:]))
        return -jnp.sum(terms) / ((c - 1) * b)

    return objective, M0, E0


def jax_fns(jax, *problem):
    objective, M0, E0 = jax_objective(jax, *problem)
    f_obj = jax.jit(objective)
    f_grad = jax.jit(jax.value_and_grad(objective, argnums=(0, 1)))

    def obj():
        return float(f_obj(M0, E0))

    def grad():
        v, (gm, ge) = f_grad(M0, E0)
        jax.block_until_ready((gm, ge))
        return float(gm[0, 0])

    return {"jax_objective": obj, "jax_gradient": grad}


def main():
    args = common.parse(__doc__, default_reps=11, quick_reps=3)
    mod = common.load(args.framework)
    if not args.no_header:
        print("benchmark,variant,size,threads,median_ms,us_per_node,nodes,ratio_to_plain")
    for layers in (2, 4):
        size = f"l{layers}_c1024"
        if mod is None:
            print(f"dlstm,{args.framework}_missing,{size},{args.threads},nan,,,")
            continue
        if args.framework == "torch":
            mod.set_num_threads(args.threads)
        make = torch_fns if args.framework == "torch" else jax_fns
        runs = make(mod, *read(DATA / f"lstm_l{layers}_c1024.txt"))
        for run in runs.values():
            run()  # warm-up (JAX: compiles)
        reps = max(1, args.reps // 4) if args.framework == "torch" else args.reps
        times = common.interleaved(runs, reps)
        for v, t in times.items():
            print(f"dlstm,{v},{size},{args.threads},{common.median(t):.4f},,,")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
