#!/usr/bin/env python3
"""Side-by-side timings on the inputs GradBench's evals sent (read back from run_eval.py's session
logs): dualcast's functions, the plain double-precision objectives of the tool (*_plain), and
GradBench's `manual` tool (hand-written derivatives), and `codipack` where its binaries exist.
The implementations are interleaved: each repetition runs every (implementation, function) once
with min_runs RUNS, in a shuffled order, and takes the median of its evaluate timings; the table
reports the median (and the minimum) over repetitions. Standard library only.

  compare.py --logs DIR --gradbench DIR --tool CMD [--reps 7] [--runs 5] [--out results.csv]
             [--only module:description ...] [--baseline CMD]

--baseline CMD times a second build of the tool (e.g. main's, before a change) in the same
shuffled order, as implementation "dualcast baseline": a paired before / after on one machine.
"""
import argparse
import csv
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile

# particle and saddle have no primal: their two columns are the variants ff and rf (both nested
# derivatives; fr and rr are refused by the tool).
PRIMAL = {"lse": "primal", "llsq": "primal", "ode": "primal", "lstm": "objective", "gmm": "objective", "ba": "objective",
          "kmeans": "cost", "det": "primal", "ht": "objective", "particle": "ff", "saddle": "ff"}
DERIVATIVE = {"lse": "gradient", "llsq": "gradient", "ode": "gradient", "lstm": "jacobian", "gmm": "jacobian", "ba": "jacobian",
              "kmeans": "dir", "det": "gradient", "ht": "jacobian", "particle": "rf", "saddle": "rf"}
PLAIN = {"lse": "primal_plain", "lstm": "objective_plain", "gmm": "objective_plain",
         "ba": "objective_plain"}

# The workloads compared by default: the targets and the sizes of the published figures.
DEFAULT = ["lstm:l=2,c=1024", "lstm:l=6,c=8192", "gmm:64_5_1000", "gmm:20_25_1000",
           "gmm:64_100_1000", "ba:ba1_n49_m7776_p31843", "ba:ba2_n21_m11315_p36455",
           "lse:n=80000", "lse:n=1280000", "kmeans:k=100,n=1000,d=8",
           "kmeans:k=1000,n=10000,d=16", "llsq:n=4096,m=128", "ode:n=10000,s=100", "det:9",
           "det:10", "ht:hand1_t26_c100", "ht:hand6_t26_c1600", "particle:w=0",
           "saddle:w=0"]


def inputs_from_logs(logs, wanted):
    found = {}
    for name in sorted(os.listdir(logs)):
        if not name.endswith(".log.jsonl"):
            continue
        with open(os.path.join(logs, name)) as f:
            for line in f:
                if '"kind": "evaluate"' not in line[:400]:
                    continue
                m = json.loads(line).get("message", {})
                key = f"{m.get('module')}:{m.get('description')}"
                if m.get("kind") == "evaluate" and key in wanted and key not in found:
                    found[key] = m["input"]
    return found


class Tool:
    def __init__(self, cmd):
        self.p = subprocess.Popen(shlex.split(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)

    def run(self, module, function, text):
        self.p.stdin.write('{"id": 1, "kind": "evaluate", "module": "%s", "function": "%s", '
                           '"input": %s}\n' % (module, function, text))
        self.p.stdin.flush()
        r = json.loads(self.p.stdout.readline())
        if not r.get("success"):
            raise RuntimeError(f"{module}::{function}: {r.get('error')}")
        return [t["nanoseconds"] for t in r["timings"] if t["name"] == "evaluate"]


def run_binary(binary, function, path):
    out = subprocess.run([binary, path, function], capture_output=True, text=True, check=True)
    times = [json.loads(l) for l in out.stdout.splitlines()[1:]]
    return [t["nanoseconds"] for t in times if t["name"] == "evaluate"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--gradbench", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", nargs="*", default=DEFAULT)
    ap.add_argument("--baseline", default=None)
    args = ap.parse_args()

    inputs = inputs_from_logs(args.logs, set(args.only))
    tools = {"dualcast": Tool(args.tool)}
    if args.baseline:
        tools["dualcast baseline"] = Tool(args.baseline)
    rows = []
    tmp = tempfile.mkdtemp()
    for key in args.only:
        if key not in inputs:
            print(f"{key}: no input in the logs, skipped", file=sys.stderr)
            continue
        module = key.split(":")[0]
        inp = dict(inputs[key], min_runs=args.runs, min_seconds=0)
        text = json.dumps(inp)
        path = os.path.join(tmp, "input.json")
        with open(path, "w") as f:
            f.write(text)
        jobs = [(name, f) for name in tools for f in (PRIMAL[module], DERIVATIVE[module])]
        if module in PLAIN:
            jobs.append(("plain C++ (ours)", PLAIN[module]))
        for other in ("manual", "codipack"):
            binary = os.path.join(args.gradbench, "tools", other, "bin", module)
            if os.access(binary, os.X_OK):
                jobs += [(other, PRIMAL[module]), (other, DERIVATIVE[module])]
        samples = {job: [] for job in jobs}
        for rep in range(args.reps):
            order = list(jobs)
            random.shuffle(order)
            for impl, function in order:
                if impl in ("manual", "codipack"):
                    t = run_binary(os.path.join(args.gradbench, "tools", impl, "bin", module),
                                   function, path)
                else:
                    t = tools.get(impl, tools["dualcast"]).run(module, function, text)
                samples[(impl, function)].append(statistics.median(t) / 1e6)
        for (impl, function), ms in samples.items():
            row = {"module": module, "workload": key.split(":", 1)[1], "implementation": impl,
                   "function": function, "median_ms": round(statistics.median(ms), 4),
                   "min_ms": round(min(ms), 4), "reps": len(ms), "runs_per_rep": args.runs}
            rows.append(row)
            print(f"{key:<32} {impl:<18} {function:<16} {row['median_ms']:>10.3f} ms "
                  f"(min {row['min_ms']:.3f})", flush=True)
    for tool in tools.values():
        tool.p.stdin.close()
        tool.p.wait()
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
