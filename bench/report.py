#!/usr/bin/env python3
"""Plots and the documentation's tables from the benchmark CSVs (bench/results/, written by
bench/run and scripts/gpu-session).

  bench/report.py [--no-plots] [--readme README.md] [--performance docs/performance.md]

Plots (PNG, bench/results/): lstm_cell.png (time vs size per variant, the memory floor as a
line), speedup.png (dualcast's speed-up over PyTorch eager and JAX jit per suite), hmlstm.png (per
mask layout) and arity.png. Tables, rewritten from the same CSVs (never typed by hand), with the
machine and peer versions from bench/results/machine.txt / gpu_machine.txt and the issues'
targets, met or not:
  docs/performance.md  the CPU tables between `<!-- bench-tables:begin -->` and
                       `<!-- bench-tables:end -->`, the primitives' between
                       `<!-- primitives-tables:... -->`, the GPU's between `<!-- gpu-tables:... -->`
                       and the compile times' between `<!-- compile-tables:... -->`;
  docs/gradbench.md    the GradBench comparison between `<!-- gradbench-tables:... -->` and
                       lstm against CoDiPack between `<!-- gradbench-lstm-tables:... -->`;
  docs/higher-order.md H v against the gradient beside JAX / PyTorch between
                       `<!-- hvp-tables:... -->`;
  README.md            a short headline table between `<!-- headline-tables:begin -->` and
                       `<!-- headline-tables:end -->`.
"""
import argparse
import csv
import math
import statistics
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BEGIN, END = "<!-- bench-tables:begin -->", "<!-- bench-tables:end -->"
PRIM_BEGIN, PRIM_END = "<!-- primitives-tables:begin -->", "<!-- primitives-tables:end -->"
GPU_BEGIN, GPU_END = "<!-- gpu-tables:begin -->", "<!-- gpu-tables:end -->"
HEAD_BEGIN, HEAD_END = "<!-- headline-tables:begin -->", "<!-- headline-tables:end -->"
COMPILE_BEGIN, COMPILE_END = "<!-- compile-tables:begin -->", "<!-- compile-tables:end -->"
GB_BEGIN, GB_END = "<!-- gradbench-tables:begin -->", "<!-- gradbench-tables:end -->"
GBL_BEGIN, GBL_END = "<!-- gradbench-lstm-tables:begin -->", "<!-- gradbench-lstm-tables:end -->"
SPARSE_BEGIN, SPARSE_END = "<!-- sparse-partials-tables:begin -->", "<!-- sparse-partials-tables:end -->"
BLAS_BEGIN, BLAS_END = "<!-- blas-choice:begin -->", "<!-- blas-choice:end -->"
GEMM_BEGIN, GEMM_END = "<!-- gemm-tables:begin -->", "<!-- gemm-tables:end -->"
MULT_BEGIN, MULT_END = "<!-- mult-counts:begin -->", "<!-- mult-counts:end -->"
HVP_BEGIN, HVP_END = "<!-- hvp-tables:begin -->", "<!-- hvp-tables:end -->"
BRANCH_BEGIN, BRANCH_END = "<!-- branch-tables:begin -->", "<!-- branch-tables:end -->"
# The GradBench targets (issue 12) per module: (what, measured ratio from the row's times, goal).
GRADBENCH_TARGETS = {
    ("lstm", "l=2,c=1024"): ("jacobian / plain", lambda t: t["dc_d"] / t["plain"], 2.5),
    ("lstm", "l=6,c=8192"): ("jacobian / codipack's", lambda t: t["dc_d"] / t["cp_d"], 1.0),
    "gmm": ("jacobian / manual's", lambda t: t["dc_d"] / t["m_d"], 1.0),
    "ba": ("jacobian / manual's", lambda t: t["dc_d"] / t["m_d"], 1.0),
    "lse": ("gradient / primal", lambda t: t["dc_d"] / t["dc_p"], 2.0),
    "kmeans": ("dir / manual's", lambda t: t["dc_d"] / t["m_d"], 2.0),
}
# The founding paper's HM-LSTM figures on a V100 (values + 4 partials, masks as vectors): fused,
# and TensorFlow + XLA where given.
PAPER_HM = {"512": ("17.4 us", "-"), "1024": ("51.4 us", "-"), "2048": ("192.8 us", "806.9 us")}
FUTHARK = {"reduce_plus": "1.0", "reduce_times": "2.4", "reduce_min": "2.5", "scan_plus": "1.2",
           "scan_times": "3.3", "scan_min": "1.3", "histogram_plus": "1.5-1.9"}


def read_csv(filename):
    """The rows of bench/results/<filename> as dicts; None when the file is not there."""
    path = RESULTS / filename
    if not path.exists():
        return None
    with path.open() as f:
        return list(csv.DictReader(f))


def rows(name):
    rs = read_csv(f"{name}.csv") or []
    return [r for r in rs if r.get("benchmark") and r["benchmark"] != "benchmark"]


def ms(rs, **match):
    """The median_ms of the first row matching every column given (nan when none or missing)."""
    for r in rs:
        if all(r.get(k) == v for k, v in match.items()):
            try:
                return float(r["median_ms"])
            except (TypeError, ValueError):
                return math.nan
    return math.nan


def fmt(x, digits=2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "missing"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def key_values(name):
    """The `key: value` lines of bench/results/<name> as a dict (empty when the file is missing)."""
    path = RESULTS / name
    info = {}
    if path.exists():
        for line in path.read_text().splitlines():
            k, _, v = line.partition(": ")
            info[k] = v
    return info


def machine():
    return key_values("machine.txt")


def copy_gbps():
    for r in rows("lstm_cell"):
        if r["benchmark"] == "copy":
            return float(r["gb_per_s"])
    return math.nan


def caption():
    m = machine()
    return (f"{m.get('date', '?')}, {m.get('cpu', '?')}, {m.get('cores', '?')}, "
            f"copy {fmt(copy_gbps(), 1)} GB/s; PyTorch {m.get('torch', '?')}, JAX {m.get('jax', '?')}")


def variants_of(rs, bench=None):
    out = []
    for r in rs:
        if (bench is None or r["benchmark"] == bench) and r["variant"] not in out:
            out.append(r["variant"])
    return out


def sizes_of(rs, bench):
    out = []
    for r in rs:
        if r["benchmark"] == bench and r["size"] not in out:
            out.append(r["size"])
    return out


def peer(rs, name, **match):
    """A peer's time; its *_missing row makes it nan (reported as missing)."""
    return ms(rs, variant=name, **match)


# ---- tables --------------------------------------------------------------------------------------
def table(header, body):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def lstm_cell_table():
    rs = [r for r in rows("lstm_cell") if r["benchmark"] == "lstm_cell"]
    vs = [v for v in variants_of(rs) if not v.endswith("_missing")]
    for p in ("torch_eager", "jax_jit"):
        if p not in vs:
            vs.append(p)
    body = []
    for s in sizes_of(rs, "lstm_cell"):
        body.append([s] + [fmt(ms(rs, variant=v, size=s)) if v != "hand_scalar" or
                           any(r["variant"] == v and r["size"] == s for r in rs) else "not run"
                           for v in vs])
    mem = []
    s = sizes_of(rs, "lstm_cell")[-1] if rs else ""
    for v in vs:
        mib = next((r.get("added_mib") for r in rs if r["variant"] == v and r["size"] == s), None)
        mem.append(fmt(float(mib)) if mib not in (None, "", "nan") else "missing")
    body.append([f"MiB added at {s}"] + mem)
    return table(["B x H (ms)"] + vs, body)


def steps_table():
    body = []
    for name, suite in (("LSTM step with gate matmuls", "lstm_step"),
                        ("char-LSTM training step", "char_lstm_step")):
        rs = [r for r in rows(suite) if r["benchmark"] == suite]
        for v in variants_of(rs):
            r = next(r for r in rs if r["variant"] == v)
            body.append([name, r["size"], v, fmt(ms(rs, variant=v))])
    return table(["suite", "size", "variant", "ms"], body)


def hmlstm_table():
    rs = [r for r in rows("divergence") if r["benchmark"] == "divergence"]
    vs = variants_of(rs)
    body = []
    for n in sizes_of(rs, "divergence"):
        for layout in ("n_x_1", "1_x_n", "n_x_n"):
            body.append([n, layout] + [fmt(ms(rs, variant=v, size=n, mask_layout=layout)) for v in vs])
    return table(["n", "masks"] + [f"{v} (ms)" for v in vs], body)


def guarded_log_table():
    rs = [r for r in rows("divergence") if r["benchmark"] == "guarded_log"]
    body = [[r["size"], r["variant"], r["mask_layout"], fmt(float(r["median_ms"])),
             r["ratio_to_uniform"]] for r in rs]
    return table(["n (n x n floats)", "variant", "x", "ms", "over uniform (paired)"], body)


def arity_table():
    rs = rows("arity")
    vs = variants_of(rs)
    arities = []
    for r in rs:
        if r["arity"] not in arities:
            arities.append(r["arity"])
    body = [[k] + [fmt(ms(rs, variant=v, arity=k)) for v in vs] for k in arities]
    size = rs[0]["size"] if rs else "?"
    return table([f"inputs ({size}, ms)"] + vs, body)


def dlstm_table():
    rs = [r for r in rows("tape_overhead") if r["benchmark"] == "dlstm"]
    vs = variants_of(rs)
    body = [[s] + [fmt(ms(rs, variant=v, size=s)) for v in vs] for s in sizes_of(rs, "dlstm")]
    return table(["D-LSTM (ms)"] + vs, body)


def targets_table():
    cell = rows("lstm_cell")
    big = "4096x1024"
    fused = ms(cell, variant="fused_vjp", size=big)
    floor = ms(cell, variant="floor_at_copy_bw", size=big)
    hm = rows("divergence")
    ch = rows("char_lstm_step")
    out = []

    def row(what, value, ok, goal):
        met = "missing" if value is None or math.isnan(value) else ("met" if ok else "not met")
        out.append([what, goal, fmt(value), met])

    row("LSTM cell 4096x1024: fused / memory floor", fused / floor, fused / floor <= 1.10, "<= 1.10")
    t = peer(cell, "torch_eager", size=big)
    row("LSTM cell 4096x1024: speed-up over PyTorch eager", t / fused, t / fused >= 6, ">= 6")
    j = peer(cell, "jax_jit", size=big)
    row("LSTM cell 4096x1024: speed-up over JAX jit", j / fused, j / fused >= 1, ">= 1")
    one = ms(cell, variant="fused_value_vjp", size=big)
    if not math.isnan(one):  # value_and_vjp: values and cotangents in one pass, as the peers'
        row("LSTM cell 4096x1024, one pass (value_and_vjp): speed-up over PyTorch eager", t / one,
            t / one >= 6, ">= 6")
        row("LSTM cell 4096x1024, one pass (value_and_vjp): speed-up over JAX jit", j / one,
            j / one >= 1, ">= 1")
    for layout in ("n_x_1", "1_x_n"):
        f = ms(hm, variant="fused_partials", size="2048", mask_layout=layout)
        sep = ms(hm, variant="separate_partials", size="2048", mask_layout=layout)
        jj = ms(hm, variant="jax_jit", size="2048", mask_layout=layout)
        row(f"HM-LSTM n=2048, masks {layout}: speed-up over all branches + select", sep / f,
            sep / f >= 4, ">= 4")
        row(f"HM-LSTM n=2048, masks {layout}: speed-up over JAX jit", jj / f, jj / f > 1, "> 1")
    f = ms(ch, variant="dualcast_fused")
    row("char-LSTM step: speed-up over PyTorch eager", ms(ch, variant="torch_eager") / f,
        ms(ch, variant="torch_eager") / f >= 1.5, ">= 1.5")
    row("char-LSTM step: speed-up over JAX jit", ms(ch, variant="jax_jit") / f,
        ms(ch, variant="jax_jit") / f >= 1, ">= 1")
    row("char-LSTM step: speed-up over the unfused tape", ms(ch, variant="dualcast_unfused") / f,
        ms(ch, variant="dualcast_unfused") / f > 1, "> 1")
    return table(["target", "goal", "measured", ""], out)


def primitives_section():
    rs = rows("primitives")
    back = {r["variant"]: r["paired_ratio"] for r in rs
            if r["benchmark"] == "backward_over_primal"}
    ratio = [[r["variant"], r["paired_ratio"], back.get(r["variant"], "-"),
              FUTHARK.get(r["variant"], "?"), r["met"]]
             for r in rs if r["benchmark"] == "grad_over_primal"]
    axis0 = [[r["variant"], r["size"], fmt(ms(rs, benchmark="along_axis0_primal",
                                              variant=r["variant"])),
              fmt(float(r["median_ms"])), r["paired_ratio"]]
             for r in rs if r["benchmark"] == "along_axis0_gradient"]
    sten = []
    for bench in ("stencil_2d", "stencil_3d"):
        for th in ("1", "2"):
            sub = [r for r in rs if r["benchmark"] == bench and r["threads"] == th]
            if sub:
                sten.append([bench[-2:].upper(), sub[0]["size"], th] +
                            [fmt(ms(sub, variant=v)) for v in
                             ("forward", "gather", "scatter_atomic", "scatter_copies",
                              "gather_recompute")])
    tgt = [[r["benchmark"][-2:].upper(), r["variant"], r["paired_ratio"], r["target"], r["met"]]
           for r in rs if r["benchmark"].startswith("stencil") and r["target"]]
    conv = []
    for size in dict.fromkeys(r["size"] for r in rs if r["benchmark"] == "conv2d_fwd_bwd"):
        sub = [r for r in rs if r["benchmark"] == "conv2d_fwd_bwd" and r["size"] == size]
        d, g = ms(sub, variant="direct"), ms(sub, variant="im2col_gemm")
        gemm = [r for r in sub if r["variant"] == "im2col_gemm"]
        paired = gemm[0]["paired_ratio"] if gemm and gemm[0]["paired_ratio"] else None
        conv.append([size, fmt(d), fmt(g), fmt(1 / float(paired)) if paired else "?",
                     sub[0]["target"] or "?"])
    m = machine()
    return "\n\n".join([
        f"Measured {m.get('primitives_date', m.get('date', '?'))} ({m.get('cpu', '?')}, "
        f"{m.get('cores', '?')}) by {m.get('primitives_command', '`bench/run`')}; generated by "
        "`bench/report.py` from `bench/results/primitives.csv`.",
        table(["primitive (10^7 float32)", "gradient / primal", "backward / primal",
               "Futhark (A100)", "met"], ratio),
    ] + ([table(["along axis 0 (float32)", "shape", "primal (ms)", "gradient (ms)",
                 "gradient / primal"], axis0)] if axis0 else []) + [
        table(["stencil", "size", "threads", "forward (ms)", "gather adjoint", "scatter, atomic",
               "scatter, per-thread copies", "gather, partials recomputed"], sten),
        table(["stencil", "what", "measured", "target", "met"], tgt),
        table(["conv2d forward + backward (2 threads)", "direct (ms)", "im2col + gemm (ms)",
               "direct / gemm (paired)", "automatic picks"], conv),
    ])


def readme_section():
    m = machine()
    parts = [
        f"Measured {caption()}; BLAS {m.get('blas', '?')}; {m.get('compiler', '?')}. "
        "Command: `bench/run` (2 threads, float32 unless noted; medians of interleaved "
        "repetitions). Generated by `bench/report.py` from `bench/results/*.csv`: do not edit "
        "by hand.",
        "**Targets** (issue: LSTM cell, HM-LSTM, char-LSTM step):\n\n" + targets_table(),
        "**LSTM cell, forward + backward** (`bench/results/lstm_cell.csv`):\n\n" + lstm_cell_table(),
        "**Steps with their matmuls** (`lstm_step.csv`, `char_lstm_step.csv`):\n\n" + steps_table(),
        "**HM-LSTM cell update: values and the four Jacobian diagonals** (`divergence.csv`):\n\n"
        + hmlstm_table(),
        "**A guarded domain, `if (x > 0) return log(x) * w; return w + w;`** (`divergence.csv`, "
        "`guarded_log` rows):\n\n" + guarded_log_table(),
        "**Arity sweep** `prod_k tanh(+-x_k)`, forward + backward on the tape (`arity.csv`):\n\n"
        + arity_table(),
        "**D-LSTM (ADBench data, float64): objective and gradient** (`tape_overhead.csv`):\n\n"
        + dlstm_table(),
    ]
    return "\n\n".join(parts)


def replace_block(text, begin, end, body, path):
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + body + "\n" + end + tail


# ---- GPU (bench/gpu_cells.cu, bench/peers/gpu_peers.py; run by scripts/gpu-session) -------------
# The latest GPU session's files: bench/results/gpu_*.csv and gpu_machine.txt (its device and
# times). An earlier device's files move to bench/results/runs/<date>-<device>/ (2026-11-26-h200/): kept, not read here,
# so that no table sets one device's figures against another's.
def gpu_info():
    return key_values("gpu_machine.txt")


def gpu_rows():
    return rows("gpu_cells") + rows("gpu_peers")


def gpu_copy_gbps():
    for r in rows("gpu_cells"):
        if r["benchmark"] == "copy":
            return float(r["gb_per_s"])
    return math.nan


def us(x):
    return "missing" if math.isnan(x) else f"{x * 1000:.0f}"


def ratio(a, b):
    return "missing" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"


def gpu_lstm_table():
    rs = [r for r in gpu_rows() if r["benchmark"] == "lstm_cell"]
    vs = ["fused_vjp", "fused_store", "separate", "hand_cuda", "tape_fused", "tape_unfused",
          "torch_eager", "jax_jit", "floor_at_copy_bw"]
    one_pass = any(r["variant"] == "fused_value_vjp" for r in rs)
    if one_pass:  # value_and_vjp: one kernel, 14 arrays (the run of 2026-11-26 21:45 on)
        vs.insert(1, "fused_value_vjp")
    body = []
    for size in sizes_of(rs, "lstm_cell"):
        t = {v: ms(rs, variant=v, size=size) for v in vs}
        body.append([size] + [us(t[v]) for v in vs] + [
            ratio(t["fused_vjp"], t["floor_at_copy_bw"]), ratio(t["torch_eager"], t["fused_vjp"]),
            ratio(t["jax_jit"], t["fused_vjp"])] +
            ([ratio(t["jax_jit"], t["fused_value_vjp"])] if one_pass else []))
    return table(["B x H"] + [f"{v} (us)" for v in vs] +
                 ["fused_vjp / floor", "PyTorch / fused", "JAX / fused"] +
                 (["JAX / one pass"] if one_pass else []), body)


def gpu_hmlstm_table():
    rs = [r for r in gpu_rows() if r["benchmark"] == "hmlstm"]
    vs = ["fused_partials", "fused_vjp", "select_partials", "separate_partials", "torch_eager",
          "torch_compile", "jax_jit"]
    if not any(r["variant"] == "torch_compile" for r in rs):  # (runs before torch.compile's)
        vs.remove("torch_compile")
    body = []
    for n in sizes_of(rs, "hmlstm"):
        for layout in ("n_x_1", "1_x_n", "n_x_n"):
            t = {v: ms(rs, variant=v, size=n, note=layout) for v in vs}
            paper = PAPER_HM.get(n, ("-", "-"))
            body.append([n, layout.replace("_", " ")] + [us(t[v]) for v in vs] + [
                ratio(t["separate_partials"], t["fused_partials"]),
                ratio(t["jax_jit"], t["fused_partials"]), paper[0], paper[1]])
    return table(["n", "masks"] + [f"{v} (us)" for v in vs] +
                 ["separate / fused", "JAX / fused", "paper V100 fused", "paper V100 TF + XLA"],
                 body)


def gpu_step_table():
    rs = [r for r in gpu_rows() if r["benchmark"] == "lstm_step"]
    vs = ["fused", "unfused", "matmuls_only", "torch_eager", "torch_compile", "jax_jit"]
    if not any(r["variant"] == "torch_compile" for r in rs):  # (runs before torch.compile's)
        vs.remove("torch_compile")
    body = []
    for size in sizes_of(rs, "lstm_step"):
        t = {v: ms(rs, variant=v, size=size) for v in vs}
        body.append([size] + [us(t[v]) for v in vs] + [ratio(t["unfused"], t["fused"])])
    return table(["B x I x H"] + [f"{v} (us)" for v in vs] + ["unfused / fused"], body)


def gpu_frameworks_table():
    """Issues 35 and 40: the LSTM cell from C++, as a PyTorch / JAX operation, and the peers
    torch.compile (default, max-autotune), eager and JAX jit on the same card."""
    rs = [r for r in gpu_rows() if r["benchmark"] == "lstm_cell"]
    vs = ["fused_vjp", "fused_value_vjp", "dualcast_torch", "dualcast_jax", "torch_eager",
          "torch_compile", "torch_compile_max_autotune", "jax_jit"]
    body = []
    for size in sizes_of(rs, "lstm_cell"):
        t = {v: ms(rs, variant=v, size=size) for v in vs}
        body.append([size] + [us(t[v]) for v in vs] + [
            ratio(t["dualcast_torch"], t["fused_vjp"]), ratio(t["dualcast_jax"], t["fused_vjp"]),
            ratio(t["torch_compile"], t["fused_vjp"]), ratio(t["torch_compile"], t["dualcast_torch"]),
            ratio(t["jax_jit"], t["dualcast_jax"])])
    return table(["B x H"] + [f"{v} (us)" for v in vs] +
                 ["dualcast_torch / C++", "dualcast_jax / C++", "torch.compile / C++",
                  "torch.compile / dualcast_torch", "JAX / dualcast_jax"], body)


def cell16_floor_ms(rs, variant, size):
    """The floor gpu_cells wrote into a lstm_cell_16 row's note (floor_ms=...), nan if none."""
    for r in rs:
        if r["variant"] == variant and r["size"] == size and "floor_ms=" in r["note"]:
            return float(r["note"].split("floor_ms=")[1].split(";")[0])
    return math.nan


def gpu_cell16_table():
    """Issue 37: the LSTM cell stored in 16 bits (gpu_cells' lstm_cell_16 rows) and the bfloat16
    peers (gpu_peers' lstm_cell_16 rows)."""
    rs = [r for r in gpu_rows() if r["benchmark"] == "lstm_cell_16"]
    ours = ["float32_value_and_vjp", "bfloat16_value_and_vjp", "half_value_and_vjp",
            "float32_apply_vjp", "bfloat16_apply_vjp", "half_apply_vjp"]
    peers = ["torch_eager", "torch_fused_lstmcell", "torch_compile", "jax_jit"]
    body = []
    for size in sizes_of(rs, "lstm_cell_16"):
        t = {v: ms(rs, variant=v, size=size) for v in ours + peers}
        floor = cell16_floor_ms(rs, "bfloat16_value_and_vjp", size)
        best = min(t["bfloat16_value_and_vjp"], t["bfloat16_apply_vjp"])
        body.append([size] + [us(t[v]) for v in ours + peers] + [
            ratio(t["float32_value_and_vjp"], t["bfloat16_value_and_vjp"]),
            ratio(t["bfloat16_value_and_vjp"], floor),
            ratio(t["torch_eager"], best), ratio(t["torch_fused_lstmcell"], best),
            ratio(t["torch_compile"], best), ratio(t["jax_jit"], best)])
    return table(["B x H"] + [f"{v} (us)" for v in ours] +
                 [f"{v} bf16 (us)" for v in peers] +
                 ["float32 / bf16 (one pass)", "bf16 one pass / its floor",
                  "eager / bf16", "fused LSTMCell / bf16", "torch.compile / bf16",
                  "JAX / bf16"], body)


def gpu_ncu_table():
    rs = read_csv("gpu_ncu.csv")
    if rs is None:
        return "(no ncu results)"
    body = [[r["run"].replace("_", " "), r["mode"], r["kernel"], r["time_us"], r["dram_read_mb"],
             r["dram_write_mb"], r["dram_pct_of_peak"], r["warps_active_pct"], r["registers"]]
            for r in rs if "contract 2/5" not in r["mode"] and "contract 3/5" not in r["mode"]
            and "contract 4/5" not in r["mode"] and "contract 5/5" not in r["mode"]]
    return table(["run", "kernel's work", "kernel", "time (us)", "DRAM read (MB)",
                  "DRAM written (MB)", "DRAM % of peak", "warps active %", "registers"], body)


def gpu_targets_table():
    rs = gpu_rows()
    body = []
    for size in sizes_of([r for r in rs if r["benchmark"] == "lstm_cell"], "lstm_cell"):
        f = ms(rs, benchmark="lstm_cell", variant="fused_vjp", size=size)
        fl = ms(rs, benchmark="lstm_cell", variant="floor_at_copy_bw", size=size)
        pt = ms(rs, benchmark="lstm_cell", variant="torch_eager", size=size)
        jx = ms(rs, benchmark="lstm_cell", variant="jax_jit", size=size)
        body.append([f"LSTM cell {size}: fused forward + VJP within 1.25x of the bytes at copy "
                     "bandwidth", ratio(f, fl), "met" if f <= 1.25 * fl else "not met"])
        body.append([f"LSTM cell {size}: at least 3x faster than PyTorch CUDA eager",
                     ratio(pt, f), "met" if pt >= 3 * f else "not met"])
        body.append([f"LSTM cell {size}: no slower than JAX jit", ratio(jx, f),
                     "met" if f <= jx else "not met"])
        one = ms(rs, benchmark="lstm_cell", variant="fused_value_vjp", size=size)
        if not math.isnan(one):  # JAX's jit computes values and cotangents in one computation
            body.append([f"LSTM cell {size}: one pass (value_and_vjp) no slower than JAX jit",
                         ratio(jx, one), "met" if one <= jx else "not met"])
    for layout in ("n_x_1", "1_x_n", "n_x_n"):
        f = ms(rs, benchmark="hmlstm", variant="fused_partials", size="2048", note=layout)
        sp = ms(rs, benchmark="hmlstm", variant="separate_partials", size="2048", note=layout)
        body.append([f"HM-LSTM n = 2048, masks {layout.replace('_', ' ')}: at least 4x faster "
                     "than all branches then select", ratio(sp, f),
                     "met" if sp >= 4 * f else "not met"])
    # issues 35 and 40: the cell against torch.compile, and as a PyTorch / JAX operation
    for size in sizes_of([r for r in rs if r["benchmark"] == "lstm_cell"], "lstm_cell"):
        f = ms(rs, benchmark="lstm_cell", variant="fused_vjp", size=size)
        one = ms(rs, benchmark="lstm_cell", variant="fused_value_vjp", size=size)
        best = min(f, one) if not math.isnan(one) else f
        tc = ms(rs, benchmark="lstm_cell", variant="torch_compile", size=size)
        ta = ms(rs, benchmark="lstm_cell", variant="torch_compile_max_autotune", size=size)
        peer_best = min((x for x in (tc, ta) if not math.isnan(x)), default=math.nan)
        if not math.isnan(peer_best):
            body.append([f"LSTM cell {size}: no slower than torch.compile (its faster mode)",
                         ratio(peer_best, best), "met" if best <= peer_best else "not met"])
        dt = ms(rs, benchmark="lstm_cell", variant="dualcast_torch", size=size)
        dj = ms(rs, benchmark="lstm_cell", variant="dualcast_jax", size=size)
        jx = ms(rs, benchmark="lstm_cell", variant="jax_jit", size=size)
        if not math.isnan(dt):
            if size == "4096x1024":
                body.append([f"LSTM cell {size} as a PyTorch operation: within 1.1x of C++",
                             ratio(dt, f), "met" if dt <= 1.1 * f else "not met"])
            if not math.isnan(peer_best):
                body.append([f"LSTM cell {size} as a PyTorch operation: no slower than "
                             "torch.compile", ratio(peer_best, dt),
                             "met" if dt <= peer_best else "not met"])
        if not math.isnan(dj):
            if size == "4096x1024":
                body.append([f"LSTM cell {size} as a JAX operation: within 1.1x of C++",
                             ratio(dj, f), "met" if dj <= 1.1 * f else "not met"])
            body.append([f"LSTM cell {size} as a JAX operation: no slower than JAX jit",
                         ratio(jx, dj), "met" if dj <= jx else "not met"])
    for layout in ("n_x_1", "1_x_n", "n_x_n"):
        for n in sizes_of([r for r in rs if r["benchmark"] == "hmlstm"], "hmlstm"):
            f = ms(rs, benchmark="hmlstm", variant="fused_partials", size=n, note=layout)
            tc = ms(rs, benchmark="hmlstm", variant="torch_compile", size=n, note=layout)
            if not math.isnan(tc) and n == "2048":
                body.append([f"HM-LSTM n = {n}, masks {layout.replace('_', ' ')}: faster than "
                             "torch.compile", ratio(tc, f), "met" if f < tc else "not met"])
    # issue 37: the bfloat16 cell
    c16 = [r for r in rs if r["benchmark"] == "lstm_cell_16"]
    size = "16384x1024"
    b = ms(c16, variant="bfloat16_value_and_vjp", size=size)
    if not math.isnan(b):
        f32 = ms(c16, variant="float32_value_and_vjp", size=size)
        fl = cell16_floor_ms(c16, "bfloat16_value_and_vjp", size)
        body.append([f"bfloat16 LSTM cell {size} (one pass): at least 1.8x faster than float32",
                     ratio(f32, b), "met" if f32 >= 1.8 * b else "not met"])
        body.append([f"bfloat16 LSTM cell {size} (one pass): within 1.2x of its floor",
                     ratio(b, fl), "met" if b <= 1.2 * fl else "not met"])
        for peer, what, factor in (("torch_eager", "at least 3x faster than PyTorch eager", 3),
                                   ("jax_jit", "no slower than JAX jit", 1),
                                   ("torch_compile", "no slower than torch.compile", 1)):
            pm = ms(c16, variant=peer, size=size)
            if not math.isnan(pm):
                body.append([f"bfloat16 LSTM cell {size}: {what} in bfloat16", ratio(pm, b),
                             "met" if pm >= factor * b else "not met"])
    # issue 40: the histogram with device-side indices (gpu_primitives.csv; absent: not measured)
    hr = rows("gpu_primitives")
    h = ms(hr, benchmark="histogram_bytes_over_copy", variant="histogram_plus_device_int64")
    c = ms(hr, benchmark="histogram_bytes_over_copy", variant="copy_12_bytes_per_row")
    body.append(["plus histogram of 10^7 rows, int64 indices on the device: within 2x of its "
                 "bytes at copy bandwidth",
                 "not measured" if math.isnan(h) else ratio(h, c),
                 "" if math.isnan(h) else "met" if h <= 2 * c else "not met"])
    return table(["target (issue 17)", "measured", ""], body)


def gpu_primitives_table():
    """The primitives' rows; with a "primal before" column only where gpu_primitives_before.csv
    sits beside gpu_primitives.csv (the same device: an earlier device's files live in
    bench/results/<device>/ and are never compared here)."""
    rs, before = rows("gpu_primitives"), rows("gpu_primitives_before")
    body = []
    for r in rs:
        if r["benchmark"] != "grad_over_primal":
            continue
        v = r["variant"]
        p = ms(rs, benchmark="primal", variant=v)
        pb = ms(before, benchmark="primal", variant=v)
        gbs = next((x["gb_per_s"] for x in rs if x["benchmark"] == "primal" and x["variant"] == v), "")
        body.append([v.replace("_", " ")] + (["-" if math.isnan(pb) else us(pb)] if before else [])
                    + [us(p), gbs or "-", us(float(r["median_ms"])),
                       r["paired_ratio"], r["target"].replace("<= ", "") or "-",
                       "" if not r["target"] else "met" if r["met"] == "yes" else "not met"])
    return table(["primitive (10^7 float32)"] + (["primal before (us)"] if before else []) +
                 ["primal (us)", "primal GB/s", "gradient (us)", "gradient / primal",
                  "Futhark (A100)", ""], body)


def gpu_own_vs_cub_table():
    """Issue 40: the backend's own passes against CUB's device-wide primitives (gpu_primitives.csv,
    benchmark own_vs_cub); "not measured" until a GPU session wrote those rows."""
    rs = [r for r in rows("gpu_primitives") if r["benchmark"] == "own_vs_cub"]
    prims = [("reduce", "yes (both)"), ("segmented_reduce", "yes (both)"),
             ("scan", "own yes, CUB no (float scan)"), ("scan_grad", "own yes, CUB no (float scan)"),
             ("histogram_plus", "yes (both: stable sort)"),
             ("sorted_histogram_plus", "yes (both: stable sort)"),
             ("sorted_histogram_max", "yes (both: stable sort, the same bits)")]
    body = []
    for name, det in prims:
        own = ms(rs, variant=f"{name}_own")
        cells = []
        for v in ("cub", "cub_device_idx"):
            t = ms(rs, variant=f"{name}_{v}")
            if math.isnan(t):
                continue
            r = next(x for x in rs if x["variant"] == f"{name}_{v}")
            cells.append(f"{v.replace('_', ' ')}: {us(t)} us ({r['paired_ratio']}x own)")
        body.append([name.replace("_", " "), "not measured" if math.isnan(own) else us(own),
                     "; ".join(cells) or "not measured", det])
    return table(["primitive (10^7 float32)", "own (us)", "CUB (us, paired ratio)",
                  "run-to-run deterministic"], body)


def gpu_section():
    g = gpu_info()
    return "\n\n".join([
        f"Measured {g.get('date', '?')} on {g.get('device', '?')}; copy "
        f"{fmt(gpu_copy_gbps(), 0)} GB/s (device to device, bytes read + written); {g.get('cuda', '?')}; "
        f"PyTorch {g.get('torch', '?')}, JAX {g.get('jax', '?')}. Commands: {g.get('commands', '?')}. "
        "Medians of interleaved repetitions timed with CUDA events (JAX: to block_until_ready). "
        "Generated by `bench/report.py` from `bench/results/gpu_*.csv`: do not edit by hand.",
        "**Targets**:\n\n" + gpu_targets_table(),
        "**LSTM cell, forward + VJP, float32** (`gpu_cells.csv`, `gpu_peers.csv`; floor: the 19 "
        "arrays a forward + VJP in two passes must move, at the copy bandwidth):\n\n" + gpu_lstm_table(),
        "**HM-LSTM update, values + the four Jacobian diagonals** (the paper's experiment; "
        "PyTorch and JAX: every branch then `where`, VJP of ones):\n\n" + gpu_hmlstm_table(),
        "**LSTM step with its gate matmuls (cuBLAS, float32) on the tape, forward + backward** "
        "(PyTorch without TF32, as its default; JAX at its default precision, with which by JAX's "
        "documentation float32 matmuls may run in TF32 on recent NVIDIA GPUs: its times are not "
        "comparable with the float32 columns):\n\n" + gpu_step_table(),
        "**Parallel primitives, gradient / primal** (`gpu_primitives.csv`: `gpu_primitives "
        "--reps 21`, one row of 10^7 float32 on the tape, the gradient including its primal; "
        "Futhark's ratios were measured on an A100"
        + ("; \"before\": `gpu_primitives_before.csv`, the same benchmark on the same device "
           "before this session's changes" if rows("gpu_primitives_before") else "")
        + "):\n\n" + gpu_primitives_table(),
        "**Own passes against CUB's device-wide primitives** (`gpu_primitives.csv`, rows "
        "`own_vs_cub`; reduce / segmented reduce: the broadcast reduction with `cuda_primitives`; "
        "scan: `cumsum` on a tensor with `cuda_primitives::scan` own / cub (scan grad: on a tape "
        "variable, forward + backward); histogram: `reduce_by_index` with host indices into 1000 "
        "bins (the privatized pass) against radix sort + segmented reduce, the indices copied per "
        "call (cub) or already on the device (cub device idx); sorted histogram plus / max: "
        "100000 bins, int64 indices on the device, `cuda_primitives::sorted_histogram` own (sorted "
        "on the host) / cub (on the device); the own pass stays the default until these rows say "
        "otherwise):\n\n" + gpu_own_vs_cub_table(),
    ] + ([
        "**The LSTM cell from PyTorch and JAX, and torch.compile** (issues 35, 40; `gpu_cells.csv` "
        "for the C++ calls, `gpu_peers.csv` for the rest: `dualcast_torch` is "
        "`dualcast.torch.lstm_cell`, forward + autograd's backward; `dualcast_jax` "
        "`dualcast.jax.lstm_cell` under one jit of forward and vjp; torch.compile's first call "
        "(compilation) excluded):\n\n" + gpu_frameworks_table(),
        "**The LSTM cell stored in 16 bits** (issue 37; `gpu_cells.csv`'s lstm_cell_16 rows: every "
        "array in that storage, computed in float; floor: the bytes of one pass, 14 arrays of 2 "
        "bytes, at the copy bandwidth; the bfloat16 peers from `gpu_peers.csv`, their ratios "
        "against dualcast's faster bfloat16 form):\n\n" + gpu_cell16_table(),
    ] if any(r["benchmark"] == "lstm_cell_16" or r["variant"].startswith("dualcast_")
             for r in gpu_rows()) else []) + [
        "**Nsight Compute on the cell kernels** (`gpu_ncu.csv`: `ncu --clock-control none` on "
        f"`gpu_cells --profile`, 16384 x 1024 LSTM arrays, HM-LSTM n = 2048; {g.get('ncu', '?')}"
        "):\n\n" + gpu_ncu_table(),
    ])


def small_arrays_table():
    """Issue 11's targets for small arrays and divergent branches, from tape_overhead.csv and
    divergence.csv."""
    to = rows("tape_overhead")
    node = next((float(r["us_per_node"]) for r in to if r["benchmark"] == "node_chain"
                 and r["variant"] == "fused_record_and_backward" and r["size"] == "14"), math.nan)
    body = [["a fused node's record + backward, 14 doubles, `tanh(h * w + b)` (4096-node chain)",
             f"{fmt(node)} us", "<= 1 us", "met" if node <= 1 else "not met"]]
    for size, goal_obj, goal_grad in (("l2_c1024", 2, 4), ("l4_c1024", 2, 4)):
        plain = ms(to, benchmark="dlstm", variant="plain_objective", size=size)
        obj = ms(to, benchmark="dlstm", variant="objective", size=size)
        grad = ms(to, benchmark="dlstm", variant="gradient", size=size)
        body.append([f"D-LSTM {size.replace('_', ', ')}: objective / plain C++ objective "
                     f"({fmt(plain)} ms)", f"{fmt(obj / plain)}x", f"<= {goal_obj}x",
                     "met" if obj / plain <= goal_obj else "not met"])
        body.append([f"D-LSTM {size.replace('_', ', ')}: gradient / plain C++ objective",
                     f"{fmt(grad / plain)}x", f"<= {goal_grad}x",
                     "met" if grad / plain <= goal_grad else "not met"])
    hm = [r for r in rows("divergence") if r["benchmark"] == "divergence"]
    for n in sizes_of(hm, "divergence"):
        a = ms(hm, variant="fused_partials", size=n, mask_layout="1_x_n")
        b = ms(hm, variant="fused_partials", size=n, mask_layout="n_x_1")
        body.append([f"HM-LSTM values + 4 partials, n = {n}: masks 1 x n against n x 1",
                     f"{fmt(a / b)}x", "<= 1.5x", "met" if a / b <= 1.5 else "not met"])
    f = ms(hm, variant="fused_partials", size="2048", mask_layout="1_x_n")
    sep = ms(hm, variant="separate_partials", size="2048", mask_layout="1_x_n")
    body.append(["HM-LSTM n = 2048, masks 1 x n: all branches in separate passes + select / fused",
                 f"{fmt(sep / f)}x", ">= 3x", "met" if sep / f >= 3 else "not met"])
    return table(["what", "measured", "target (issue 11)", ""], body)


def node_chain_table():
    rs = [r for r in rows("tape_overhead") if r["benchmark"] == "node_chain"]
    modes = ("fused", "lazy", "unfused")
    body = []
    for size in sizes_of(rs, "node_chain"):
        row = [size]
        for m in modes:
            r = next((r for r in rs if r["variant"] == f"{m}_record_and_backward"
                      and r["size"] == size), None)
            row.append(fmt(float(r["us_per_node"])) if r else "missing")
        body.append(row)
    return table(["elements per node", "fused (us / node)", "lazy (us / node)",
                  "unfused (us / node)"], body)


def element_access_table():
    rs = rows("element_access")
    body = [[r["variant"], fmt(float(r["ns_per_element"])), r["ratio_to_raw"]] for r in rs]
    return table(["1024 x 1024 doubles, one thread", "ns / element", "over the raw pointer"], body)


def readme_extra_sections():
    return "\n\n".join([
        "**Small arrays and divergent branches** (`tape_overhead.csv`, `divergence.csv`):\n\n"
        + small_arrays_table(),
        "**Cost per node of a chain of `tanh(h * w + b)` nodes, record + backward** "
        "(`tape_overhead.csv`, double):\n\n" + node_chain_table(),
        "**Element access** (`element_access.csv`, `bench/element_access.cpp`):\n\n"
        + element_access_table(),
    ])


def tape_compile_table():
    """Issue 33's per-translation-unit figures (compile_time_tape.csv): CPU seconds (user + sys)
    and peak compiler memory, the mean of each tree's repetitions, one column per tree in the
    order measured (a tree "X without Y" -- a variant that differs only in run-time code -- counts
    as X; "X compiled" is tree X with dualcast::compiled, "X compiled+pch" with the precompiled
    header of dualcast.hpp and autodiff.hpp too: dualcast_precompile, our tests' DUALCAST_PCH)."""
    rs = read_csv("compile_time_tape.csv")
    if rs is None:
        return ""
    rs = [r for r in rs if r["tree"] != "tree"]
    for r in rs:
        r["tree"] = r["tree"].split(" without ")[0]
    trees = list(dict.fromkeys(r["tree"] for r in rs))
    keys = list(dict.fromkeys((r["source"], r["opt"]) for r in rs))

    def cell(src, opt, tree):
        sel = [r for r in rs if r["source"] == src and r["opt"] == opt and r["tree"] == tree]
        if not sel:
            return "-"
        t = [float(r["user_s"]) + float(r["sys_s"]) for r in sel]
        mem = max(int(r["peak_mib"]) for r in sel)
        return f"{sum(t) / len(t):.1f} s, {mem} MiB" + (f" ({len(t)} runs)" if len(t) > 1 else "")

    # Rows measured in pairs ("... paired": the two trees compiled alternately in one run, the
    # fair comparison on a loaded machine) get a table of their own; "... paired:G" names a later
    # group G of such runs, whose first tree is its own "before".
    def group_of(t):
        return t.split(" paired", 1)[1].removeprefix(":") if " paired" in t else None

    def label(t):
        return t.split(" paired", 1)[0]

    paired = [t for t in trees if group_of(t) is not None]
    trees = [t for t in trees if t not in paired]
    keys_main = [k for k in keys if any(cell(*k, t) != "-" for t in trees)]
    body = [[f"`{src}`", opt] + [cell(src, opt, t) for t in trees] for src, opt in keys_main]
    compilers = sorted({r["compiler"] for r in rs})

    def mean_cpu(src, opt, tree):
        t = [float(r["user_s"]) + float(r["sys_s"]) for r in rs
             if r["source"] == src and r["opt"] == opt and r["tree"] == tree]
        return sum(t) / len(t) if t else None

    ptable = ""
    for g in dict.fromkeys(group_of(t) for t in paired):
        members = [t for t in paired if group_of(t) == g]
        if len(members) < 2:
            continue
        b = members[0]
        pbody = []
        for src, opt in keys:
            afters = [t for t in members[1:] if mean_cpu(src, opt, t) is not None]
            mb = mean_cpu(src, opt, b)
            if mb is None or not afters:
                continue
            a = afters[0]
            ma = mean_cpu(src, opt, a)
            pbody.append([f"`{src}`", opt, cell(src, opt, b), label(a), cell(src, opt, a),
                          f"{100 * (ma / mb - 1):+.0f} %"])
        ptable += ("\n\nPaired runs (before and after compiled alternately, one compile at a "
                   f"time, in one run; before = {label(b)}"
                   + ("" if "compiled" in b else ", headers only") + "):\n\n"
                   + table(["translation unit", "level", "before", "after: tree", "after",
                            "CPU time"], pbody))
    return ("\n\n**Tape programs and test files** (`bench/results/compile_time_tape.csv`, written by "
            f"`bench/compile-tape`: g++ {', '.join(compilers)} with the release preset's flags, CPU "
            "seconds (user + sys, mean of the runs) and peak compiler memory per translation unit, "
            "one column per tree; `compiled`: linking dualcast::compiled, `+pch`: with the "
            "precompiled header of `dualcast/dualcast.hpp` and `dualcast/autodiff.hpp` "
            "(`dualcast_precompile`; before 2026-11-28 the tests' header with doctest), whose own "
            "build and the component's are rows of their own; "
            "measured on a 2-core machine shared with other compiles, so compare within a row):"
            "\n\n" + table(["translation unit", "level"] + trees, body) + ptable)


def compile_section():
    rs = read_csv("compile_time.csv")
    if rs is None:
        return "(no compile-time results)"
    body = [[r["kernel"].replace("_", " "), r["mode"], r["inputs"] or "-", r["outputs"] or "-",
             r["seconds"], r["peak_mib"]] for r in rs]
    compilers = sorted({r["compiler"] for r in rs})
    units = ""
    units_rows = read_csv("compile_units.csv")  # scripts/compile-times test bench/results/compile_units.csv
    if units_rows is not None:
        us_ = sorted(units_rows, key=lambda r: -float(r["seconds"]))
        total = sum(float(r["seconds"]) for r in us_)
        units = ("\n\nPer translation unit of the project's own build (`bench/results/compile_units.csv`, "
                 "written by `scripts/compile-times`: each compile alone, seconds of CPU and peak "
                 f"compiler memory; total {total:.0f} s):\n\n"
                 + table(["target", "source", "seconds", "peak MiB"],
                         [[r["target"], f"`{r['source']}`", r["seconds"], r["peak_mib"]]
                          for r in us_]))
    return ("Generated by `bench/report.py` from `bench/results/compile_time.csv` "
            f"(`bench/compile-time`, g++ {', '.join(compilers)}, -O3 -march=native unless noted, "
            "one compile at a time; the `300_active_sets` rows: `bench/compile/hana_vs_constexpr.py`)."
            "\n\n" + table(["kernel", "how it is called", "inputs", "outputs", "seconds",
                            "peak MiB"], body) + units + tape_compile_table())


def headline_section():
    """The README's few rows: the LSTM cell against PyTorch and JAX on the CPU and the GPU (the two
    passes apply + vjp and the one pass value_and_vjp), and the char-LSTM training step."""
    m, g = machine(), gpu_info()

    def row(what, device, rs, size, unit, fmt_t):
        two = ms(rs, variant="fused_vjp", size=size)
        one = ms(rs, variant="fused_value_vjp", size=size)
        t, j = ms(rs, variant="torch_eager", size=size), ms(rs, variant="jax_jit", size=size)

        def peer_cell(p):
            if math.isnan(one):
                return f"{fmt_t(p)} {unit} ({p / two:.2f}x)"
            return f"{fmt_t(p)} {unit} ({p / two:.2f}x / {p / one:.2f}x)"
        mine = fmt_t(two) + ("" if math.isnan(one) else f" / {fmt_t(one)}") + f" {unit}"
        return [what, device, mine, peer_cell(t), peer_cell(j)]

    body = []
    cell = rows("lstm_cell")
    if not math.isnan(ms(cell, variant="fused_vjp", size="4096x1024")):
        body.append(row("LSTM cell 4096x1024, forward + VJP", f"CPU, {m.get('cores', '?')}", cell,
                        "4096x1024", "ms", fmt))
    ch = rows("char_lstm_step")
    d = ms(ch, variant="dualcast_fused")
    if not math.isnan(d):
        t, j = ms(ch, variant="torch_eager"), ms(ch, variant="jax_jit")
        body.append(["char-LSTM training step (B = 64, H = 512, 32 characters, Adam)",
                     f"CPU, {m.get('cores', '?')}", f"{fmt(d)} ms", f"{fmt(t)} ms ({t / d:.2f}x)",
                     f"{fmt(j)} ms ({j / d:.2f}x)"])
    gr = [r for r in gpu_rows() if r["benchmark"] == "lstm_cell"]
    dev = g.get("device", "?").split(" (")[0]
    for size in sizes_of(gr, "lstm_cell"):
        body.append(row(f"LSTM cell {size}, forward + VJP", dev, gr, size, "us",
                        lambda x: f"{x * 1000:.0f}"))
    return (f"CPU: {m.get('date', '?')}, {m.get('cpu', '?')}; GPU: {g.get('date', '?')}. float32, "
            "medians of interleaved repetitions. The LSTM cell's forward + VJP as two passes "
            "(`apply`, `vjp`) / one pass (`value_and_vjp`); in brackets how many times longer the "
            "peer takes than each. Generated by `bench/report.py` from `bench/results/*.csv`: every "
            "table, with the machines and commands, is in "
            "[docs/performance.md](docs/performance.md).\n\n"
            + table(["workload", "device", "dualcast", "PyTorch eager", "JAX jit"], body))


def gradbench_section():
    rs = read_csv("gradbench_compare.csv")
    if rs is None:
        return "(no GradBench comparison)"
    evals = list(dict.fromkeys((r["module"], r["workload"]) for r in rs))
    body = []
    for mod, wl in evals:
        sub = [r for r in rs if r["module"] == mod and r["workload"] == wl]

        def two(impl):
            v = [float(r["median_ms"]) for r in sub if r["implementation"] == impl]
            return (v + [math.nan, math.nan])[:2]
        dc_p, dc_d = two("dualcast")
        m_p, m_d = two("manual")
        cp_p, cp_d = two("codipack")
        plain = next((float(r["median_ms"]) for r in sub if r["implementation"].startswith("plain")),
                     math.nan)
        t = dict(dc_p=dc_p, dc_d=dc_d, m_p=m_p, m_d=m_d, cp_p=cp_p, cp_d=cp_d, plain=plain)
        g3 = lambda x: f"{x:.0f}" if x >= 100 else f"{x:.3g}"
        pair = lambda a, b: "--" if math.isnan(a) else f"{g3(a)} / {g3(b)}"
        target = GRADBENCH_TARGETS.get((mod, wl), GRADBENCH_TARGETS.get(mod))
        goal = ""
        if target:
            what, f, limit = target
            v = f(t)
            goal = f"{what} <= {limit:g}: {v:.2f} ({'met' if v <= limit else 'not met'})"
        # particle / saddle: no primal, the two nested-derivative variants ff and rf instead
        ours = (f"ff {g3(dc_p)} / rf {g3(dc_d)}" if mod in ("particle", "saddle") else
                f"{pair(dc_p, dc_d)} ({dc_d / dc_p:.1f}x)")
        body.append([f"{mod} {wl}", ours,
                     "--" if math.isnan(plain) else g3(plain), pair(m_p, m_d),
                     pair(cp_p, cp_d), goal])
    return ("Generated by `bench/report.py` from `bench/results/gradbench_compare.csv` "
            "(milliseconds, the median over repetitions of each repetition's median; the CSV also "
            "holds the minima).\n\n"
            + table(["eval, workload", "dualcast primal / derivative (ratio)", "plain",
                     "manual", "codipack", "target"], body))


# Issue 36's targets for GradBench's lstm jacobian against CoDiPack's, per workload.
LSTM_CODIPACK_TARGETS = {"l=2,c=1024": 1.0, "l=6,c=8192": 1.3}


def gradbench_lstm_section(stem="gradbench_lstm_codipack", threads="one thread"):
    """lstm against CoDiPack (issue 36): bench/results/gradbench_lstm_codipack.csv, written by
    compare.py (--baseline: the tool before the change, in the same shuffled order), with the run's
    machine, date and command in gradbench_lstm_codipack_machine.txt; the same on two threads
    (the tool's --threads 2; CoDiPack and manual are single-threaded) from *_2threads.* when
    present."""
    rs = read_csv(stem + ".csv")
    if rs is None:
        return "(no lstm comparison with CoDiPack)"
    m = key_values(stem + "_machine.txt")
    body = []
    for wl in dict.fromkeys(r["workload"] for r in rs):
        sub = {(r["implementation"], r["function"]): float(r["median_ms"]) for r in rs
               if r["workload"] == wl}
        kv = dict(p.split("=") for p in wl.split(","))
        steps = int(kv["l"]) * (int(kv["c"]) - 1)  # layer-steps: one fused node each
        g = lambda impl, f: sub.get((impl, f), math.nan)
        dc_o, dc_j = g("dualcast", "objective"), g("dualcast", "jacobian")
        b_o, b_j = g("dualcast baseline", "objective"), g("dualcast baseline", "jacobian")
        cp_o, cp_j = g("codipack", "objective"), g("codipack", "jacobian")
        m_o, m_j = g("manual", "objective"), g("manual", "jacobian")
        g3 = lambda x: "--" if math.isnan(x) else (f"{x:.0f}" if x >= 100 else f"{x:.3g}")
        limit = LSTM_CODIPACK_TARGETS.get(wl)
        r = dc_j / cp_j
        goal = ("(no target)" if limit is None
                else f"<= {limit:g}: {'met' if r <= limit else 'not met'}")
        body.append([f"l={kv['l']}, c={kv['c']}",
                     f"{g3(dc_o)} / {g3(dc_j)} ({dc_j / dc_o:.1f}x)",
                     f"{g3(b_o)} / {g3(b_j)}",
                     f"{g3(cp_o)} / {g3(cp_j)} ({cp_j / cp_o:.1f}x)",
                     f"{g3(m_o)} / {g3(m_j)}",
                     f"{dc_j / steps * 1000:.1f} / {cp_j / steps * 1000:.1f}",
                     f"**{r:.2f}** {goal}"])
    two = ("\n\n" + gradbench_lstm_section(stem + "_2threads", "two threads")
           if threads == "one thread" and (RESULTS / (stem + "_2threads.csv")).exists() else "")
    return (f"Generated by `bench/report.py` from `bench/results/{stem}.csv`: "
            f"{m.get('date', '?')}, {m.get('cpu', '?')}, {threads}, {m.get('load', '')}. "
            f"`{m.get('command', '?')}`. Milliseconds, objective / jacobian, the median over "
            "repetitions of each repetition's median; \"before\" is the tool without this "
            "change, timed in the same shuffled order (`--baseline`).\n\n"
            + table(["workload", "dualcast objective / jacobian (ratio)", "dualcast before",
                     "codipack (ratio)", "manual", "jacobian us per layer-step: dualcast / codipack",
                     "jacobian dualcast / codipack (target)"], body) + two)


def node_bytes_table():
    """Bytes of bookkeeping per node on 14 doubles (issue 36): bench/results/tape_node_bytes.csv,
    `tape_overhead --only node_bytes` (deterministic: counted, not timed), with its gradient slots
    and without (tape::node_memory_bytes(): the arena alone)."""
    rs = [r for r in rows("tape_node_bytes") if r["benchmark"] == "node_bytes"]
    if not rs:
        return ""
    by = {r["variant"]: r for r in rs}
    names = {"fused_cell_recompute": "fused D-LSTM cell (recompute)",
             "fused_cell_store": "fused D-LSTM cell (store)",
             "lazy_elementwise": "lazy elementwise tanh(x * w + b)", "matmul": "matmul",
             "sum": "sum"}
    body = []
    for k, name in names.items():
        if k in by and k + "_with_slots" in by:
            arena, saved = float(by[k]["bytes_per_node"]), float(by[k]["saved_per_node"])
            total = float(by[k + "_with_slots"]["bytes_per_node"])
            body.append([name, f"{arena:.0f}", f"{saved:.2f}", f"{total:.0f}",
                         f"{total - 32 * saved:.0f}"])
    return ("\n\nBookkeeping per node on 14 doubles (generated from "
            "`bench/results/tape_node_bytes.csv`, `tape_overhead --only node_bytes`: counted, not "
            "timed). Arena: the node in the tape's arena with its operand references, shapes and "
            "saved-tensor records (32 bytes each), not the tensors saved; with slots: plus the "
            "gradient slot of each output (a block outside the arena, "
            "`detail::slot_block_bytes`; g++ 12's standard library; a gradient, while backward "
            "holds one, adds its header, 168 bytes (the tensor and the serial of the backward "
            "that made it), made and dropped with it).\n\n"
            + table(["node", "bytes in the arena", "saved tensors", "bytes with its slots",
                     "with its slots, beyond the saved tensors' records"], body))


def operators_table():
    """The plain-operator D-LSTM's gradient against the fused cell's (issue 36: at most 1.5x, on one
    thread and on two): bench/results/tape_operators.csv, `tape_overhead --only dlstm` at
    --threads 1 and 2 (each run's rows, the paired ratio per repetition), with the run's machine,
    date and command in tape_operators_machine.txt."""
    rs = [r for r in rows("tape_operators") if r["benchmark"] == "dlstm"]
    if not rs:
        return ""
    m = key_values("tape_operators_machine.txt")
    body = []
    for size in dict.fromkeys(r["size"] for r in rs):
        for threads in dict.fromkeys(r["threads"] for r in rs if r["variant"] == "gradient"):
            fused = ms(rs, variant="gradient", size=size, threads=threads)
            for variant, name in (("operators_gradient", "gates lazy (two nodes per step)"),
                                  ("operators_each_statement_gradient",
                                   "every statement materialised (six or seven)")):
                r = next((r for r in rs if r["variant"] == variant and r["size"] == size
                          and r["threads"] == threads), None)
                if r is None:
                    continue
                ratio = float(r["paired_ratio"])
                goal = ("<= 1.5: " + ("met" if ratio <= 1.5 else "not met")
                        if variant == "operators_gradient" else "--")
                body.append([size.replace("_", ", ").replace("l", "l = ", 1).replace(
                                 "c", "c = ", 1), threads, name, f"{fused:.2f}",
                             f"{float(r['median_ms']):.2f}",
                             f"**{ratio:.2f}** ({float(r['paired_ratio_q1']):.2f}-"
                             f"{float(r['paired_ratio_q3']):.2f})", goal])
    return ("\n\nThe D-LSTM written with plain tape operators against the fused cell (generated "
            "from `bench/results/tape_operators.csv`: " + m.get("date", "?") + ", "
            + m.get("cpu", "?") + ", " + m.get("load", "") + "; `" + m.get("command", "?")
            + "`). Milliseconds, the median over repetitions; plain / fused is the median "
            "(quartiles) of the per-repetition ratios, the two timed alternately.\n\n"
            + table(["D-LSTM", "threads", "plain operators", "fused cell gradient",
                     "plain-operator gradient", "plain / fused", "target"], body))


def write_gradbench(path):
    if path.exists():
        text = replace_block(path.read_text(), GB_BEGIN, GB_END, gradbench_section(), path)
        if GBL_BEGIN in text:
            text = replace_block(text, GBL_BEGIN, GBL_END,
                                 gradbench_lstm_section() + node_bytes_table()
                                 + operators_table(), path)
        path.write_text(text)


def write_performance(path):
    text = path.read_text()
    text = replace_block(text, BEGIN, END,
                         readme_section() + "\n\n" + readme_extra_sections(), path)
    if rows("primitives"):
        text = replace_block(text, PRIM_BEGIN, PRIM_END, primitives_section(), path)
    if rows("gpu_cells"):
        text = replace_block(text, GPU_BEGIN, GPU_END, gpu_section(), path)
    text = replace_block(text, COMPILE_BEGIN, COMPILE_END, compile_section(), path)
    path.write_text(text)


def write_readme(path):
    text = path.read_text()
    text = replace_block(text, HEAD_BEGIN, HEAD_END, headline_section(), path)
    path.write_text(text)


# ---- plots ---------------------------------------------------------------------------------------
def lstm_cell_lines(ax, rs, variants, xlabel, ylabel, title):
    """The LSTM cell's time against elements (B x H), one line per variant, the memory floor
    dashed; log-log (lstm_cell.png, and gpu_cells.png's first panel)."""
    for v in variants:
        pts = [(int(r["size"].split("x")[0]) * int(r["size"].split("x")[1]), float(r["median_ms"]))
               for r in rs if r["variant"] == v and r["median_ms"] not in ("nan", "")]
        if not pts:
            continue
        xs, ys = zip(*pts)
        style = dict(linestyle="--", color="black") if v == "floor_at_copy_bw" else dict(marker="o")
        ax.plot(xs, ys, label="memory floor (copy bandwidth)" if v == "floor_at_copy_bw" else v,
                **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def plots():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    note = caption()

    # LSTM cell: time vs elements per variant, the floor as a line.
    rs = [r for r in rows("lstm_cell") if r["benchmark"] == "lstm_cell"]
    if rs:
        fig, ax = plt.subplots(figsize=(8, 5.5))
        lstm_cell_lines(ax, rs, variants_of(rs), "elements (B x H)",
                        "forward + backward time (ms)", "LSTM cell update, float32, 2 threads")
        fig.text(0.01, 0.01, note, fontsize=7)
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        fig.savefig(RESULTS / "lstm_cell.png", dpi=110)
        plt.close(fig)

    # Speed-up over the peers per suite.
    cell, step, ch, hm, tape = (rows(n) for n in ("lstm_cell", "lstm_step", "char_lstm_step",
                                                  "divergence", "tape_overhead"))
    suites = [
        ("LSTM cell\n4096x1024", ms(cell, variant="fused_vjp", size="4096x1024"),
         peer(cell, "torch_eager", size="4096x1024"), peer(cell, "jax_jit", size="4096x1024")),
        ("LSTM step\n+ matmuls", ms(step, benchmark="lstm_step", variant="fused_lazy"),
         peer(step, "torch_eager"), peer(step, "jax_jit")),
        ("char-LSTM\ntraining step", ms(ch, variant="dualcast_fused"), peer(ch, "torch_eager"),
         peer(ch, "jax_jit")),
        ("HM-LSTM 2048\nmasks n x 1", ms(hm, variant="fused_partials", size="2048", mask_layout="n_x_1"),
         peer(hm, "torch_eager", size="2048", mask_layout="n_x_1"),
         peer(hm, "jax_jit", size="2048", mask_layout="n_x_1")),
        ("HM-LSTM 2048\nmasks 1 x n", ms(hm, variant="fused_partials", size="2048", mask_layout="1_x_n"),
         peer(hm, "torch_eager", size="2048", mask_layout="1_x_n"),
         peer(hm, "jax_jit", size="2048", mask_layout="1_x_n")),
        ("D-LSTM l=2\ngradient", ms(tape, benchmark="dlstm", variant="gradient", size="l2_c1024"),
         peer(tape, "torch_gradient", size="l2_c1024"), peer(tape, "jax_gradient", size="l2_c1024")),
    ]
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.38
    for k, (label, idx) in enumerate((("over PyTorch eager", 2), ("over JAX jit", 3))):
        vals = [s[idx] / s[1] if s[1] and not math.isnan(s[1]) else math.nan for s in suites]
        xs = [i + (k - 0.5) * width for i in range(len(suites))]
        bars = ax.bar(xs, [0 if math.isnan(v) else v for v in vals], width, label=label)
        for b, v in zip(bars, vals):
            ax.annotate("missing" if math.isnan(v) else f"{v:.1f}x",
                        (b.get_x() + b.get_width() / 2, 1.0 if math.isnan(v) else b.get_height()),
                        ha="center", va="bottom", fontsize=8, rotation=90 if math.isnan(v) else 0)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(suites)))
    ax.set_xticklabels([s[0] for s in suites], fontsize=8)
    ax.set_ylabel("speed-up of dualcast (peer time / dualcast time)")
    ax.set_title("dualcast's speed-up over PyTorch eager and JAX jit (CPU, 2 threads)")
    ax.legend()
    fig.text(0.01, 0.01, note, fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(RESULTS / "speedup.png", dpi=110)
    plt.close(fig)

    # HM-LSTM per mask layout.
    if hm:
        layouts = ("n_x_1", "1_x_n", "n_x_n")
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.5), sharey=True)
        for ax, layout in zip(axes, layouts):
            for v in variants_of(hm):
                pts = [(int(r["size"]), float(r["median_ms"])) for r in hm
                       if r["variant"] == v and r["mask_layout"] == layout and r["median_ms"] != "nan"]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=v)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"masks {layout.replace('_', ' ')}")
            ax.set_xlabel("n (n x n elements)")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("values + 4 Jacobian diagonals (ms)")
        axes[0].legend(fontsize=7)
        fig.suptitle("HM-LSTM cell update (FLUSH / COPY / UPDATE per element), float32, 2 threads")
        fig.text(0.01, 0.01, note, fontsize=7)
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        fig.savefig(RESULTS / "hmlstm.png", dpi=110)
        plt.close(fig)

    # Arity sweep.
    ar = rows("arity")
    if ar:
        fig, ax = plt.subplots(figsize=(8, 5))
        for v in variants_of(ar):
            pts = [(int(r["arity"]), float(r["median_ms"])) for r in ar if r["variant"] == v]
            ax.plot(*zip(*pts), marker="o", label=v)
        ax.set_xlabel("active inputs k")
        ax.set_ylabel("forward + backward time (ms)")
        ax.set_title(f"prod_k tanh(+-x_k) on the tape, {ar[0]['size']} float32, 2 threads")
        ax.legend()
        ax.grid(True, alpha=0.3)
        fig.text(0.01, 0.01, note, fontsize=7)
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        fig.savefig(RESULTS / "arity.png", dpi=110)
        plt.close(fig)


def gpu_plot(plt):
    """gpu_cells.png: the LSTM cell (time against elements, the floor as a line) and the HM-LSTM
    update at n = 2048 per mask layout, dualcast beside PyTorch and JAX on the same GPU."""
    rs = gpu_rows()
    g = gpu_info()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    cell = [r for r in rs if r["benchmark"] == "lstm_cell"]
    lstm_cell_lines(a1, cell, ("fused_vjp", "hand_cuda", "tape_fused", "separate", "tape_unfused",
                               "torch_eager", "jax_jit", "floor_at_copy_bw"),
                    "elements (B x 1024)", "forward + VJP (ms)", "LSTM cell, float32")
    layouts = ("n_x_1", "1_x_n", "n_x_n")
    vs = ("fused_partials", "select_partials", "separate_partials", "torch_eager", "jax_jit")
    width = 0.8 / len(vs)
    for j, v in enumerate(vs):
        ys = [ms(rs, benchmark="hmlstm", variant=v, size="2048", note=l) * 1000 for l in layouts]
        a2.bar([i + j * width for i in range(len(layouts))], ys, width, label=v)
    a2.axhline(192.8, color="black", linestyle="--", label="paper: fused on a V100")
    a2.set_xticks([i + 0.4 - width / 2 for i in range(len(layouts))])
    a2.set_xticklabels([l.replace("_", " ") + " masks" for l in layouts])
    a2.set_ylabel("values + 4 partials (us)")
    a2.set_title("HM-LSTM update, n = 2048")
    a2.set_yscale("log")
    a2.legend(fontsize=8)
    fig.text(0.01, 0.01, f"{g.get('date', '?')}, {g.get('device', '?')}", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(RESULTS / "gpu_cells.png", dpi=110)
    plt.close(fig)


# ---- data parallelism (bench/distributed/run -> distributed.csv -> docs/distributed.md) --------
DIST_BEGIN, DIST_END = "<!-- distributed-tables:begin -->", "<!-- distributed-tables:end -->"


def distributed_table():
    rs = read_csv("distributed.csv")
    if rs is None:
        return "(not measured yet: `bench/distributed/run`)"
    variants = {}  # (framework, ranks, overlap) -> {rep: row}
    for r in rs:
        variants.setdefault((r["framework"], int(r["ranks"]), r["overlap"]), {})[r["rep"]] = r
    names = {("dualcast", "1"): "dualcast", ("dualcast", "0"): "dualcast, no overlap",
             ("torch_ddp_gloo", "1"): "PyTorch DDP (Gloo)"}
    body = []
    for (fw, ranks, overlap), by_rep in sorted(variants.items(),
                                               key=lambda kv: (kv[0][0], kv[0][1], -int(kv[0][2]))):
        steps = [float(r["step_ms"]) for r in by_rep.values()]
        waits = [float(r["wait_ms"]) for r in by_rep.values() if r["wait_ms"] != "nan"]
        one = variants.get((fw, 1, "1"), {})
        # paired: each round's 1-rank time over this variant's time in the same round
        speedups = [float(one[k]["step_ms"]) / float(r["step_ms"]) for k, r in by_rep.items()
                    if k in one]
        wait = statistics.median(waits) if waits else math.nan
        step = statistics.median(steps)
        body.append([names.get((fw, overlap), fw), str(ranks), fmt(step),
                     "-" if math.isnan(wait) else f"{fmt(wait, 3)} ({100 * wait / step:.1f} %)",
                     fmt(statistics.median(speedups)) + "x" if speedups and ranks > 1 else "-"])
    cpu = rs[0]["cpu"] if rs else "?"
    cores = rs[0]["cores"] if rs else "?"
    return (f"{cpu}, {cores} cores, one thread per rank; medians of {len(set(r['rep'] for r in rs))} "
            "interleaved rounds (`bench/results/distributed.csv`)\n\n"
            + table(["variant", "ranks", "ms / step (global batch 32)",
                     "waiting at the end of backward", "1 rank / this (same round)"], body))


def write_distributed(path):
    if not path.exists():
        return
    path.write_text(replace_block(path.read_text(), DIST_BEGIN, DIST_END, distributed_table(), path))


# ---- 16-bit storage (bench/lstm_cell_16.cpp -> lstm_cell_16.csv -> docs/mixed-precision.md) ----
MP_BEGIN, MP_END = "<!-- mixed-precision-tables:begin -->", "<!-- mixed-precision-tables:end -->"


def mixed_precision_table():
    rs = read_csv("lstm_cell_16.csv")
    if rs is None:
        return "(not measured yet: `bench/run`, or `build/bench/bench/lstm_cell_16 --threads 2`)"
    copy = [r for r in rs if r["benchmark"] == "copy"]
    cells = [r for r in rs if r["benchmark"] == "lstm_cell_16"]
    body = []
    for r in cells:
        ms_, floor = float(r["median_ms"]), float(r["floor_ms"])
        p = float(r["p_no_faster"])
        ratio = "1" if r["storage"] == "float32" else (
            f"{float(r['ratio_to_float32']):.2f} ({r['wins']}/{r['reps']} faster, p {p:.2g})")
        body.append([r["mode"], r["storage"], fmt(ms_, 3), f"{float(r['bytes']) / 2**20:.0f}",
                     fmt(floor, 3), f"{ms_ / floor:.2f}", fmt(float(r["gb_per_s"]), 1), ratio])
    # (tape_memory rows: bytes = tape::saved_bytes after the forward call, wins = nodes, reps =
    # arena bytes; bench/lstm_cell_16.cpp)
    mem = [r for r in rs if r["benchmark"] == "tape_memory"]
    size = cells[0]["size"] if cells else "?"
    threads = cells[0]["threads"] if cells else "?"
    n_el = 1
    for d in size.split("x"):
        n_el *= int(d) if d.isdigit() else 1
    mem_body = [[r["mode"], r["storage"], r["wins"], f"{float(r['bytes']) / 2**20:.0f}",
                 f"{float(r['bytes']) / n_el:.0f}", r["reps"]] for r in mem]
    mem_table = ("" if not mem_body else
                 "\n\nThe tape's memory after the forward `lstm_cell` (before backward): its nodes, "
                 "the storages they keep for backward (`tape::saved_bytes`: the inputs' own storage "
                 "included, which lives anyway) and its bookkeeping (arena bytes)\n\n"
                 + table(["mode", "storage", "nodes", "MiB kept", "bytes / element",
                          "arena bytes"], mem_body))
    copy_gbps = f"{float(copy[0]['gb_per_s']):.1f} GB/s" if copy else "?"
    m = machine()  # (lstm16_* keys: a run of this suite alone, on another machine than the file's)
    return (f"Measured {m.get('lstm16_date', m.get('date', '?'))} on "
            f"{m.get('lstm16_cpu', m.get('cpu', '?'))} by "
            f"{m.get('lstm16_command', '`bench/run`')}. "
            f"Generated by `bench/report.py` from `bench/results/lstm_cell_16.csv` ("
            f"{size}, {threads} threads; copy {copy_gbps}; variants interleaved, medians; the ratio "
            "to float32 is the median of paired repetitions, with the repetitions it won and the "
            "sign test's p-value that it is no faster)\n\n"
            + table(["mode", "storage", "ms", "MiB moved", "floor ms", "/ floor", "GB/s",
                     "time / float32"], body) + mem_table)


def write_mixed_precision(path):
    if path.exists():
        path.write_text(replace_block(path.read_text(), MP_BEGIN, MP_END, mixed_precision_table(),
                                      path))


# ---- issue 41: dense against compile-time sparse partials (bench/sparse-partials) ---------------
def sparse_partials_section():
    rs = rows("sparse_partials")
    names = {"floor_at_copy_bw": "floor (19 arrays at copy bandwidth)",
             "floor_one_pass_at_copy_bw": "one-pass floor (14 arrays)",
             "dense_vjp": "apply + vjp, dense partials", "sparse_vjp": "apply + vjp, sparse partials",
             "dense_value_vjp": "value_and_vjp, dense", "sparse_value_vjp": "value_and_vjp, sparse",
             "hand_simd": "hand-written SIMD loop",
             "hand_accurate": "hand-written, the kernel's saturation-accurate derivatives",
             "hand_forward": "hand-written, forward mode (partials, then contracted)",
             "gru_dense_vjp": "GRU cell apply + vjp, dense partials (its formula)",
             "gru_sparse_vjp": "GRU cell apply + vjp, sparse partials (`cells::gru`; floor 23 arrays)"}
    parts = []
    for size in sizes_of(rs, "sparse_partials"):
        body = []
        for r in rs:
            if r["size"] != size:
                continue
            f = lambda k: fmt(float(r[k]))  # noqa: E731
            floor = r["variant"].startswith("floor")
            gru = r["variant"].startswith("gru")  # (no hand-written GRU loop)
            body.append([names.get(r["variant"], r["variant"]), f("median_ms"),
                         "-" if floor or r["variant"].startswith("hand") else f("ratio_to_dense"),
                         "-" if gru else f("ratio_to_hand"), "-" if floor else f("ratio_to_floor"),
                         "-" if floor or r["variant"].startswith(("dense", "hand", "gru_dense"))
                         else f"{r['wins_vs_dense']} / {r['reps']} (p {r['p_vs_dense']})"])
        threads = rs[0]["threads"] if rs else "?"
        parts.append(f"LSTM cell (and the GRU cell's last two rows) {size} float32, {threads} threads (`bench/results/sparse_partials.csv`; "
                     "ratios: medians of per-repetition ratios; the value_and_vjp rows against "
                     "the one-pass floor):\n\n"
                     + table(["variant", "median ms", "/ dense", "/ hand SIMD", "/ floor",
                              "sparse faster than dense in"], body))
    # Issue 41 item 1's targets, from the same run's paired ratios, met or not.
    tbody = []
    for size in sizes_of(rs, "sparse_partials"):
        def ratio(variant, col):
            for r in rs:
                if r["size"] == size and r["variant"] == variant:
                    return float(r[col])
            return math.nan
        for p in ("dense", "sparse"):
            for what, variant, col, goal in (
                    ("apply + vjp / hand-written SIMD loop", f"{p}_vjp", "ratio_to_hand", 1.0),
                    ("apply + vjp / floor (19 arrays)", f"{p}_vjp", "ratio_to_floor", 1.2),
                    ("value_and_vjp / one-pass floor (14 arrays)", f"{p}_value_vjp",
                     "ratio_to_floor", 1.25)):
                x = ratio(variant, col)
                tbody.append([size, p, what, fmt(x), f"<= {goal}",
                              "-" if math.isnan(x) else ("met" if x <= goal else "not met")])
    if tbody:
        parts.append("Issue 41's targets for the cell (2 threads, float32; the ratios above):\n\n"
                     + table(["size", "partials", "ratio", "measured", "target", ""], tbody))
    ins = read_csv("sparse_partials_instructions.csv")
    if ins:
        parts.append("Instructions per element (`bench/results/sparse_partials_instructions.csv`: "
                     "callgrind, 256 x 256, one thread, the setup's subtracted; apply + vjp is "
                     "two passes):\n\n"
                     + table(["variant", "instructions / element"],
                             [[names.get(r["variant"], r["variant"]), r["instructions_per_element"]]
                              for r in ins]))
    ct = read_csv("compile_time_sparse.csv")
    if ct:
        body = []
        for mode in dict.fromkeys(r["mode"] for r in ct):
            def mean(p, k):
                v = [float(r[k]) for r in ct if r["mode"] == mode and r["partials"] == p]
                return sum(v) / len(v) if v else math.nan
            d, sp = mean("dense", "cpu_seconds"), mean("sparse", "cpu_seconds")
            dm, sm = mean("dense", "peak_mib"), mean("sparse", "peak_mib")
            body.append([mode, fmt(d), fmt(sp), fmt(sp / d), f"{dm:.0f}", f"{sm:.0f}", fmt(sm / dm)])
        parts.append("Compile time of the wide kernel (`bench/compile/wide_kernel.cpp`, a 2-layer "
                     "D-LSTM step: 22 inputs, 5 outputs; `bench/results/compile_time_sparse.csv`: "
                     "CPU seconds, user + sys, and peak compiler memory, dense and sparse compiled "
                     "alternately; mean of the runs):\n\n"
                     + table(["how it is called", "dense s", "sparse s", "ratio", "dense MiB",
                              "sparse MiB", "ratio"], body))
    mm = key_values("sparse_partials_machine.txt")
    head = (f"Measured {mm.get('date', '?')}, {mm.get('cpu', '?')}, {mm.get('cores', '?')}, "
            f"{mm.get('compiler', '?')}; load average {mm.get('load', '?')} (a machine shared "
            "with other compiles: the timings' ratios are noisy, the instruction counts are not); "
            "command `bench/sparse-partials`; generated by `bench/report.py`: do not edit by hand."
            + (f" Instruction counts: {mm['instruction counts']}." if "instruction counts" in mm
               else ""))
    return "\n\n".join([head] + parts) if parts else "(no sparse-partials results)"


def write_sparse_partials(path):
    text = path.read_text()
    if SPARSE_BEGIN in text:
        path.write_text(replace_block(text, SPARSE_BEGIN, SPARSE_END, sparse_partials_section(), path))


# ---- issue 41 item 4: the BLAS behind the tape's matmul (bench/blas/choose) --------------------
def blas_choice_table(name="blas_choice"):
    rs = read_csv(f"{name}.csv")
    if not rs:
        return "(not measured yet: `bench/blas/choose`)"
    by = {}
    for r in rs:
        by.setdefault((r["benchmark"], r["variant"], r["size"]), {}).setdefault(
            r["blas"], {})[r["round"]] = float(r["median_ms"])
    others = [b for b in dict.fromkeys(r["blas"] for r in rs) if b != "system"]
    body = []
    for (bench, variant, size), v in by.items():
        if "system" not in v:
            continue
        row = [f"{bench} {variant}", size, fmt(statistics.median(v["system"].values()))]
        for b in others:
            ratios = sorted(v[b][k] / v["system"][k] for k in v["system"] if k in v.get(b, {}))
            row.append(f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}), "
                       f"{sum(x < 1 for x in ratios)} / {len(ratios)}" if ratios else "-")
        body.append(row)
    mm = key_values(f"{name}_machine.txt")
    loads = sorted(float(r["load1"]) for r in rs if r.get("load1"))
    load = f"; 1-minute load average at the runs' starts {loads[0]:.1f}-{loads[-1]:.1f}" if loads else ""
    return (f"Generated by `bench/report.py` from `bench/results/{name}.csv` (`"
            + mm.get("command", "bench/blas/choose") + f"`, {mm.get('date', '?')}, "
            f"{mm.get('cpu', '?')}: {rs[0]['threads']} "
            f"thread{'' if rs[0]['threads'] == '1' else 's'}, "
            f"{max(int(r['round']) for r in rs)} rounds, every candidate in each round, each "
            "time the median of 3 repetitions" + load + "). Each candidate's cell: its time over "
            "the system OpenBLAS's in the same round, median (range), then the rounds it was "
            "faster in\n\n"
            + table(["step, variant", "size", "system ms"] + [f"`{b}` / system" for b in others],
                    body))


def write_blas_choice(path):
    text = path.read_text()
    for name in ("blas_choice", "blas_choice_1t", "blas_choice_current"):
        begin, end = BLAS_BEGIN, BLAS_END
        if name != "blas_choice":
            begin, end = (x.replace("blas-choice", name.replace("_", "-")) for x in (begin, end))
        if begin in text:
            text = replace_block(text, begin, end, blas_choice_table(name), path)
    path.write_text(text)


# ---- issue 41 item 4: each candidate BLAS's sgemm against the FMA peak (bench/blas/gemm) -------
GEMM_DEFAULT = "openblas_openmp"  # what find_package(BLAS) picks where bench/run installs it


def gemm_section():
    rs, pk = read_csv("gemm.csv"), read_csv("gemm_peak.csv")
    if not rs or not pk or "round" not in rs[0] or "load1" not in rs[0]:
        return "(not measured yet: `bench/blas/gemm`)"
    med = statistics.median
    # The peak per (isa, threads, round): the best of the round's repetitions.
    peak = {}
    for r in pk:
        k = (r["isa"], r["threads"], r["round"])
        peak[k] = max(peak.get(k, 0.0), float(r["gflops"]))
    isa = "avx512" if any(k[0] == "avx512" for k in peak) else "avx2"
    ptab = []
    for i, t in dict.fromkeys((k[0], k[1]) for k in peak):
        v = sorted(x for k, x in peak.items() if k[:2] == (i, t))
        ptab.append([i.upper().replace("AVX512", "AVX-512"), t, f"{med(v):.0f}",
                     f"{v[0]:.0f}-{v[-1]:.0f}", str(len(v))])
    names = list(dict.fromkeys(r["blas"] for r in rs))
    names.sort(key=lambda n: (n != GEMM_DEFAULT, n))
    shapes = list(dict.fromkeys((r["shape"], r["m"], r["n"], r["k"]) for r in rs))
    by = {}
    for r in rs:
        by[(r["blas"], r["shape"], r["threads"], r["round"])] = float(r["gflops"])
    loads = sorted(float(r["load1"]) for r in rs)
    parts = []
    for t in sorted(dict.fromkeys(r["threads"] for r in rs), key=int):
        body = []
        for shape, m, n, k in shapes:
            row = [f"{shape} ({m} x {n} x {k})"]
            best, best_v = "-", 0.0
            for b in names:
                g = [v for (bb, s, tt, _), v in by.items() if (bb, s, tt) == (b, shape, t)]
                pct = [100 * v / peak[(isa, t, rd)] for (bb, s, tt, rd), v in by.items()
                       if (bb, s, tt) == (b, shape, t) and (isa, t, rd) in peak]
                if not g:
                    row.append("-")
                    continue
                row.append(f"{med(g):.1f} ({med(pct):.0f} %)" if pct else f"{med(g):.1f}")
                if med(g) > best_v:
                    best, best_v = b, med(g)
            row.append(best)
            body.append(row)
        # Paired: each candidate over the default in the same round, geometric mean over shapes.
        ratio_row = [f"geometric mean over the shapes, / {GEMM_DEFAULT} in the same round"]
        for b in names:
            lr = []
            for (bb, s, tt, rd), v in by.items():
                d = by.get((GEMM_DEFAULT, s, tt, rd))
                if bb == b and tt == t and d:
                    lr.append(math.log(v / d))
            ratio_row.append(f"{math.exp(sum(lr) / len(lr)):.2f}" if lr else "-")
        ratio_row.append("")
        body.append(ratio_row)
        parts.append(f"{t} thread{'s' if t != '1' else ''}: GFLOP/s, median over the rounds "
                     f"(in brackets: % of the {t}-thread FMA peak of the same round, median):\n\n"
                     + table(["shape (m x n x k)"] + [f"`{b}`" for b in names] + ["fastest"], body))
    mm = key_values("gemm_machine.txt")
    rounds = max(int(r["round"]) for r in rs)
    head = (f"Measured {mm.get('date', '?')}, {mm.get('cpu', '?')}, {mm.get('compiler', '?')}; "
            f"command `{mm.get('command', 'bench/blas/gemm')}`: {rounds} rounds, in each the FMA "
            "peak and every candidate on 1 and 2 threads, the candidates' order rotated; each "
            "figure the median of 3 repetitions; 1-minute load average at the runs' starts "
            f"{loads[0]:.1f}-{loads[-1]:.1f} (a machine shared with other sessions' compiles: the "
            "absolute figures are low and noisy, the same round's ratios less so). "
            "`bench/results/gemm.csv`, `gemm_peak.csv`; generated by `bench/report.py`: do not "
            "edit by hand.")
    return "\n\n".join([head, "FMA peak (`bench/blas/peak.cpp`: 12 independent FMA chains per "
                          "thread, best of 3 per round), GFLOP/s:\n\n"
                          + table(["ISA", "threads", "median", "range", "rounds"], ptab)] + parts)


def write_gemm(path):
    text = path.read_text()
    if GEMM_BEGIN in text:
        path.write_text(replace_block(text, GEMM_BEGIN, GEMM_END, gemm_section(), path))


# ---- issue 41 item 2: multiplications per element, sparse forward against reverse -------------
def mult_counts_section():
    rs = read_csv("mult_counts.csv")
    if not rs:
        return "(not counted yet: `bench/mult_counts.py`)"
    body = [[r["kernel"], r["inputs"], r["outputs"], r["dense_forward"], r["sparse_forward"],
             r["sparse_forward_seeds_folded"], r["reverse"],
             fmt(float(r["sparse_forward"]) / float(r["reverse"]))] for r in rs]
    return ("Generated by `bench/report.py` from `bench/results/mult_counts.csv` "
            "(`bench/mult_counts.py`: the kernels' expression graphs traced, multiplications on "
            "the derivative side per element of a VJP, the local derivatives and additions not "
            "counted)\n\n"
            + table(["kernel", "inputs", "outputs", "dense forward", "sparse forward",
                     "sparse, seeds folded", "reverse sweep", "sparse / reverse"], body))


def write_mult_counts(path):
    text = path.read_text()
    if MULT_BEGIN in text:
        path.write_text(replace_block(text, MULT_BEGIN, MULT_END, mult_counts_section(), path))


# ---- issue 38: H v against the gradient, beside JAX / PyTorch (bench/hvp.cpp, peers/hvp.py) ---
HVP_VARIANTS = [("dualcast", "gradient", "hvp", "grad_and_hvp (tape over dual<double, 1>)"),
                ("PyTorch", "torch_gradient", "torch_hvp_jvp_grad", "jvp(grad(f)) (functorch)"),
                ("PyTorch", "torch_gradient", "torch_hvp_autograd", "autograd.functional.hvp"),
                ("JAX", "jax_gradient", "jax_hvp_jvp_grad", "jit(jvp(grad(f)))")]


def hvp_section():
    """docs/higher-order.md's table: per loss and framework, the gradient's and H v's medians and
    H v / gradient as the median (quartiles) of the per-repetition ratios of that framework's own
    interleaved run; the target of issue 38 is H v at most 3x dualcast's gradient (MLP, D-LSTM)
    and faster than JAX and PyTorch."""
    rs = [r for r in rows("hvp") if r["benchmark"] in ("hvp_mlp", "hvp_dlstm")]
    body, met = [], []
    thread_counts = sorted({int(r["threads"]) for r in rs})
    for bench in ("hvp_mlp", "hvp_dlstm"):
        for size in sizes_of(rs, bench):
            if bench == "hvp_mlp":
                b, n, h = size.split("x")
                what = f"MLP, X {b} x {n}, W {n} x {h}"
            else:
                what = "D-LSTM " + size.replace("_", ", ").replace("l", "l = ").replace("c", "c = ")
            for threads in thread_counts:
                sub = [r for r in rs if r["benchmark"] == bench and r["size"] == size
                       and int(r["threads"]) == threads]
                if not sub:
                    continue
                ours = ms(sub, variant="hvp")
                for who, grad, hv, how in HVP_VARIANTS:
                    row = [r for r in sub if r["variant"] == hv]
                    if not row:
                        continue
                    q = row[0]
                    ratio = (f"{q['paired_ratio']} ({q['paired_ratio_q1']}-{q['paired_ratio_q3']})"
                             if q["paired_ratio"] not in ("", "nan") else "missing")
                    body.append([what, str(threads), f"{who}: {how}", fmt(ms(sub, variant=grad)),
                                 fmt(ms(sub, variant=hv)), ratio, fmt(ms(sub, variant=hv) / ours)])
                    if hv == "hvp" and q["paired_ratio"] not in ("", "nan"):
                        met.append((what, threads, float(q["paired_ratio"]) <= 3))
    m = machine()
    missed = {}  # loss -> the thread counts it missed on
    for what, threads, ok in met:
        if not ok:
            missed.setdefault(what, []).append(str(threads))
    if not met:
        verdict = "**not measured**"
    elif not missed:
        verdict = "**met**"
    elif sum(map(len, missed.values())) < len(met):
        where = "; ".join(f"{w} ({' and '.join(t)} thread{'s' if t != ['1'] else ''})"
                          for w, t in missed.items())
        verdict = f"**not met** for {where} (**met** for the others)"
    else:
        verdict = "**not met**"
    reps = m.get("hvp_reps", "21 repetitions; PyTorch's D-LSTM 5")
    # (hvp_* keys: a run of this suite alone, on another machine than the file's full run)
    return (f"Measured {m.get('hvp_date', m.get('date', '?'))} "
            f"({m.get('hvp_cpu', m.get('cpu', '?'))}, {m.get('hvp_cores', m.get('cores', '?'))}; "
            f"PyTorch {m.get('torch', '?')}, JAX {m.get('jax', '?')}) by "
            f"{m.get('hvp_command', '`bench/run`')}; generated by `bench/report.py` from "
            "`bench/results/hvp.csv`. Double; each framework's gradient and H v "
            f"interleaved ({reps}); H v / gradient is the median "
            "(quartiles) of the per-repetition ratios within that framework. The MLP loss: "
            "sum(y) + mean(y^2), y = tanh(tanh(X W + b) W2), in W. Issue 38's target, H v at "
            f"most 3x the gradient: {verdict}.\n\n"
            + table(["loss", "threads", "H v by", "gradient (ms)", "H v (ms)", "H v / gradient",
                     "H v time / dualcast's"], body))


def write_hvp(path):
    if path.exists() and rows("hvp"):
        text = path.read_text()
        if HVP_BEGIN in text:
            path.write_text(replace_block(text, HVP_BEGIN, HVP_END, hvp_section(), path))


# ---- issue 41 item 3: divergent batches against select (bench/divergence-branch) ---------------
def branch_section():
    rs = [r for r in (read_csv("divergence_branch.csv") or []) if r["benchmark"] == "vs_select"]
    if not rs:
        return "(not measured yet: `bench/divergence-branch`)"
    what = {"fused_partials": "`if` cell, values + 4 partials",
            "branch_partials": "`dc::branch` cell (`cells::hmlstm_update`), values + 4 partials",
            "fused_vjp": "`if` cell, VJP", "branch_vjp": "`dc::branch` cell, VJP"}
    layouts = ("n_x_1", "1_x_n", "n_x_n")
    body, verdict = [], []
    for n in sizes_of(rs, "vs_select"):
        for v in what:
            row = [n, what[v]]
            for layout in layouts:
                r = next((r for r in rs if r["size"] == n and r["variant"] == v
                          and r["mask_layout"] == layout), None)
                row.append(f"{float(r['ratio_to_uniform']):.2f}x ({fmt(float(r['median_ms']))} ms)"
                           if r else "missing")
                if r and v == "branch_partials" and layout != "n_x_1":
                    verdict.append(float(r["ratio_to_uniform"]))
            body.append(row)
    met = "met" if verdict and max(verdict) <= 1.1 else "not met"
    mm = key_values("divergence_branch_machine.txt")
    head = (f"Measured {mm.get('date', '?')}, {mm.get('cpu', '?')}, {mm.get('cores', '?')}, "
            f"{mm.get('compiler', '?')}; load average {mm.get('load', '?')} (a machine shared with "
            "other compiles). Command `bench/divergence-branch` (`bench/divergence --threads 2`: "
            "every variant and layout interleaved in each repetition); each cell: the median over "
            "repetitions of the time over the select formulation's in the same repetition, mode "
            "and layout (`select_partials`, `select_vjp`), then the variant's median time; "
            "`bench/results/divergence_branch.csv`, rows `vs_select`. Generated by "
            "`bench/report.py`: do not edit by hand.")
    target = (f"Target (issue 41): the HM-LSTM cell with 1 x n and n x n masks within 1.1x of "
              f"`select_partials` at every n: **{met}** for the `dc::branch` cell (worst "
              f"{max(verdict):.2f}x)." if verdict else "")
    return "\n\n".join([head, table(["n", "variant", "masks n x 1 (uniform)", "masks 1 x n",
                                       "masks n x n"], body), target])


def write_branch(path):
    text = path.read_text()
    if BRANCH_BEGIN in text:
        path.write_text(replace_block(text, BRANCH_BEGIN, BRANCH_END, branch_section(), path))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--performance", default=str(ROOT / "docs" / "performance.md"))
    args = ap.parse_args()
    if not args.no_plots:
        plots()
        if rows("gpu_cells"):
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            gpu_plot(plt)
    write_performance(pathlib.Path(args.performance))
    write_gradbench(pathlib.Path(args.performance).with_name("gradbench.md"))
    write_readme(pathlib.Path(args.readme))
    write_distributed(pathlib.Path(args.performance).with_name("distributed.md"))
    write_mixed_precision(pathlib.Path(args.performance).with_name("mixed-precision.md"))
    write_sparse_partials(pathlib.Path(args.performance))
    write_blas_choice(pathlib.Path(args.performance))
    write_gemm(pathlib.Path(args.performance))
    write_mult_counts(pathlib.Path(args.performance))
    write_hvp(pathlib.Path(args.performance).with_name("higher-order.md"))
    write_branch(pathlib.Path(args.performance))


if __name__ == "__main__":
    main()
