#!/usr/bin/env python3
"""Issue 41 item 2: is sparse forward as cheap as a per-element reverse sweep? Counts the
multiplications per element a fused VJP does on the derivative side, for the LSTM cell
(bench/lstm_cell.cpp: 5 inputs, 2 outputs) and the wide kernel (bench/compile/wide_kernel.cpp: a
LAYERS-layer D-LSTM step, 2 + 10 LAYERS inputs, 2 LAYERS + 1 outputs), each written here as its
kernel's lambda is, over a tracer that records the expression graph.

  bench/mult_counts.py        writes bench/results/mult_counts.csv; bench/report.py the table

Three ways to get the input cotangents from the output cotangents:
  dense forward   every intermediate carries all N partials: a unary op f(u) N multiplications
                  (f'(u) du_j), a product u v 2N, a sum none; then the contraction, N per output
  sparse forward  each carries only the inputs it depends on (dualcast::sparse_partials): f(u)
                  |S_u|, u v |S_u| + |S_v|; the contraction |S_out| per output
  reverse sweep   the values forward, then the adjoints backward through the same graph: f(u) 1
                  (ubar += f'(u) ybar), u v 2 (ubar += v ybar, vbar += u ybar), a sum none
  sparse, seeds folded  sparse forward where a partial known to be the constant 1 (an input's
                  own) costs no multiplication (x * 1 is exact: the compiler may fold it)
The local derivatives f'(u) (e.g. s (1 - s) for the sigmoid) are the same in all of them and not
counted; nor are additions. In the dense and sparse forward counts an input's own partial is the
constant 1 (the seed), multiplied like any other partial, as the kernels do it at run time.
"""
import csv
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Node:
    graph = []

    def __init__(self, op, args, deps):
        self.op, self.args, self.deps = op, args, deps
        Node.graph.append(self)

    def __add__(self, o):
        return Node("add", (self, o), self.deps | o.deps)

    def __mul__(self, o):
        return Node("mul", (self, o), self.deps | o.deps)


def unary(u):
    return Node("unary", (u,), u.deps)


sigmoid = tanh = unary


def inputs(n):
    Node.graph = []
    return [Node("input", (), frozenset([j])) for j in range(n)]


def lstm_cell():
    i, f, g, o, c = inputs(5)
    c2 = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c2)
    return 5, [h, c2]


def dlstm_step(layers):
    a = inputs(2 + 10 * layers)
    x, outs = a[0], []
    for k in range(layers):
        p = 1 + 10 * k
        h, s = a[p], a[p + 1]
        f = sigmoid(x * a[p + 2] + a[p + 6])
        i = sigmoid(h * a[p + 3] + a[p + 7])
        o = sigmoid(x * a[p + 4] + a[p + 8])
        g = tanh(h * a[p + 5] + a[p + 9])
        s2 = s * f + i * g
        h2 = o * tanh(s2)
        outs += [h2, s2]
        x = h2
    outs.append(x * a[-1])
    return len(a), outs


def counts(kernel):
    n, outs = kernel()
    dense = sparse = folded = reverse = 0
    for v in Node.graph:
        # (folded: the partials of an input are the constant 1, of anything else computed values)
        cost = lambda a: len(a.deps) - (a.op == "input")  # noqa: E731
        if v.op == "unary":
            dense, sparse, reverse = dense + n, sparse + len(v.deps), reverse + 1
            folded += cost(v.args[0])
        elif v.op == "mul":
            dense += 2 * n
            sparse += sum(len(a.deps) for a in v.args)
            folded += sum(cost(a) for a in v.args)
            reverse += 2
    contraction = sum(len(o.deps) for o in outs)
    return (n, len(outs), dense + n * len(outs), sparse + contraction, folded + contraction,
            reverse)


def main():
    rows = [("lstm_cell", *counts(lstm_cell))]
    for layers in (1, 2, 4):
        rows.append((f"dlstm_step_{layers}_layers", *counts(lambda: dlstm_step(layers))))
    out = ROOT / "bench" / "results" / "mult_counts.csv"
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "inputs", "outputs", "dense_forward", "sparse_forward",
                    "sparse_forward_seeds_folded", "reverse"])
        w.writerows(rows)
    for r in rows:
        print(*r)


if __name__ == "__main__":
    main()
