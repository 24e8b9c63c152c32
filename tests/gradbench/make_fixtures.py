#!/usr/bin/env python3
"""Writes the protocol sessions of tests/gradbench/fixtures/ (run once; the files are committed):
small inputs of each module in the messages GradBench's evals send, and a session of protocol
misuse. Deterministic (seeded)."""
import json
import os
import random

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
rng = random.Random(31337)


def rand(*shape):
    if len(shape) == 1:
        return [round(rng.random(), 6) for _ in range(shape[0])]
    return [rand(*shape[1:]) for _ in range(shape[0])]


def normal(*shape):
    if len(shape) == 1:
        return [round(rng.gauss(0, 1), 6) for _ in range(shape[0])]
    return [normal(*shape[1:]) for _ in range(shape[0])]


def session(name, module, evaluates, start_extra=None):
    msgs = [dict({"id": 0, "kind": "start", "eval": module}, **(start_extra or {})),
            {"id": 1, "kind": "define", "module": module}]
    for function, inp, description in evaluates:
        i = len(msgs)
        msgs.append({"id": i, "kind": "evaluate", "module": module, "function": function,
                     "input": dict(inp, min_runs=2, min_seconds=0.0), "description": description})
        msgs.append({"id": i + 1, "kind": "analysis", "of": i, "valid": True})
    with open(os.path.join(here, name + ".jsonl"), "w") as f:
        for m in msgs:
            f.write(json.dumps(m) + "\n")


os.makedirs(here, exist_ok=True)
x = rand(9)
session("lse", "lse", [("primal", {"x": x}, "n=9"), ("gradient", {"x": x}, "n=9")])

l, b, c = 2, 3, 5
lstm_in = {"main_params": rand(2 * l, 4 * b), "extra_params": rand(3, b), "state": rand(2 * l, b),
           "sequence": [[float(rng.random() < 0.5) for _ in range(b)] for _ in range(c)]}
session("lstm", "lstm", [("objective", lstm_in, "l=2,c=5"), ("jacobian", lstm_in, "l=2,c=5")])

d, k, n = 3, 2, 6
gmm_in = {"d": d, "k": k, "n": n, "x": normal(n, d), "alpha": normal(k), "mu": rand(k, d),
          "q": normal(k, d), "l": normal(k, d * (d - 1) // 2), "m": 1, "gamma": 1.5}
session("gmm", "gmm", [("objective", gmm_in, "3_2_6"), ("jacobian", gmm_in, "3_2_6")])

pts = rand(12, 2)
km_in = {"points": pts, "centroids": pts[-3:]}
session("kmeans", "kmeans", [("cost", km_in, "k=3,n=12,d=2"), ("dir", km_in, "k=3,n=12,d=2")])

ba_in = {"n": 3, "m": 4, "p": 5,
         "cam": [-0.758453, -1.109613, -0.845551, 34.556073, 39.676747, 53.881673, 419.194514,
                 5.864426, -8.51887, 0.087812, 0.002739],
         "x": [7.203245, 0.001144, 3.023326], "w": 0.417022, "feat": [271.760969, 834.209256]}
session("ba", "ba", [("objective", ba_in, "n3_m4_p5"), ("jacobian", ba_in, "n3_m4_p5")])

xl = rand(6)
session("llsq", "llsq", [("primal", {"x": xl, "n": 11}, "n=11,m=6"),
                         ("gradient", {"x": xl, "n": 11}, "n=11,m=6")])

xo = [round(1 + v, 6) for v in rand(5)]
session("ode", "ode", [("primal", {"x": xo, "s": 3}, "n=5,s=3"),
                       ("gradient", {"x": xo, "s": 3}, "n=5,s=3")])

A = rand(16)
session("det", "det", [("primal", {"A": A, "ell": 4}, "4"), ("gradient", {"A": A, "ell": 4}, "4"),
                       ("primal", {"A": [2.5], "ell": 1}, "1"),
                       ("gradient", {"A": [2.5], "ell": 1}, "1")])


def ht_input(complicated):
    """A synthetic hand: GradBench's 22 bones (a tree: wrist, then 5 fingers of 4 bones and the
    forearm) with random transforms, 7 vertices, 4 triangles, 5 points."""
    nb, nv = 22, 7
    parents = [-1] + [0 if i % 4 == 1 else i - 1 for i in range(1, 21)] + [0]
    model = {"bone_count": nb, "bone_names": [f"bone{i}" for i in range(nb)], "parents": parents,
             "base_relatives": [normal(3, 4) + [[0.0, 0.0, 0.0, 1.0]] for _ in range(nb)],
             "inverse_base_absolutes": [normal(3, 4) + [[0.0, 0.0, 0.0, 1.0]] for _ in range(nb)],
             "base_positions": [normal(3) + [1.0] for _ in range(nv)],
             "weights": [[round(rng.random(), 6) if rng.random() < 0.3 else 0.0 for _ in range(nb)]
                         for _ in range(nv)],
             "triangles": [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 0, 3]], "is_mirrored": complicated}
    n = 5
    data = {"model": model, "correspondences": [rng.randrange(4 if complicated else nv)
                                                for _ in range(n)], "points": normal(n, 3)}
    theta = [round(0.3 * v, 6) for v in normal(26)]
    return {"theta": theta, "data": data, "us": rand(n, 2) if complicated else []}


for variant in ("simple", "complicated"):
    hin = ht_input(variant == "complicated")
    session("ht_" + variant, "ht", [("objective", hin, variant), ("jacobian", hin, variant)])

# particle and saddle: every variant; rr is expected to be refused (check_tool.py)
session("particle", "particle", [(v, {"w": 0.0}, "w=0") for v in ("ff", "rf", "fr", "rr")])
session("saddle", "saddle", [(v, {"start": [1.0, 1.0]}, "start=1,1")
                             for v in ("ff", "rf", "fr", "rr")])

# Protocol misuse: each line with the answer check_tool.py expects.
lines = [
    '{"id": 0, "kind": "start", "eval": "nope"}',
    '{"id": 1, "kind": "define", "module": "nope"}',
    '{"id": 2, "kind": "define", "module": "lse"}',
    '{"id": 3, "kind": "evaluate", "module": "lse", "function": "hessian", "input": {"x": [1.0]}}',
    '{"id": 4, "kind": "evaluate", "module": "lse", "function": "primal", '
    '"input": {"x": [1.0, 2.0], "min_runs": 4, "min_seconds": 0}}',
    'this is not JSON',
    '[1, 2, 3]',
    '{"kind": "define", "module": "lse"}',
    '{"id": 8, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": "1"}}',
    '{"id": 9, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": []}}',
    '{"id": 10, "kind": "evaluate", "module": "lse", "function": "primal", '
    '"input": {"x": [1.0], "min_runs": -1}}',
    '{"id": 11, "kind": "evaluate", "module": "lse", "function": "gradient"}',
    '{"id": 12, "kind": "evaluate", "module": "lstm", "function": "objective", '
    '"input": {"main_params": [[1, 2, 3]], "extra_params": [], "state": [], "sequence": []}}',
    '{"id": 13, "kind": "evaluate", "module": "ba", "function": "jacobian", '
    '"input": {"n": 1, "m": 1, "p": 1, "cam": [1, 2], "x": [1, 2, 3], "w": 1, "feat": [1, 2]}}',
    '{"id": 14, "kind": "analysis", "of": 4, "valid": true}',
    '{"id": 15, "kind": "something new"}',
    # Sizes and repetitions beyond the tool's limits (registry.hpp's input_limits): an error, not
    # an allocation of 10^15 elements or a loop without end.
    '{"id": 16, "kind": "evaluate", "module": "llsq", "function": "primal", '
    '"input": {"x": [1.0, 2.0], "n": 1000000000000000}}',
    '{"id": 17, "kind": "evaluate", "module": "ode", "function": "primal", '
    '"input": {"x": [1.0], "s": 1000000000000000000}}',
    '{"id": 18, "kind": "evaluate", "module": "ba", "function": "objective", '
    '"input": {"n": 1000000000000, "m": 1, "p": 1, "cam": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], '
    '"x": [1, 2, 3], "w": 1, "feat": [1, 2]}}',
    '{"id": 19, "kind": "evaluate", "module": "lse", "function": "primal", '
    '"input": {"x": [1.0], "min_runs": 1000000000000}}',
    '{"id": 20, "kind": "evaluate", "module": "lse", "function": "primal", '
    '"input": {"x": [1.0], "min_seconds": 1e300}}',
    # min_runs 0: still one run, whose output is the answer.
    '{"id": 21, "kind": "evaluate", "module": "lse", "function": "primal", '
    '"input": {"x": [1.0, 2.0], "min_runs": 0}}',
]
with open(os.path.join(here, "protocol.jsonl"), "w") as f:
    f.write("\n".join(lines) + "\n")
