"""What the Python peers of the C++ benchmarks share: the command line (the C++ one's: --quick,
--threads N, --reps N, --memory VARIANT, plus --no-header), importing PyTorch or JAX (a row
marked missing when absent, never a silent gap), the thread count, interleaved timing, and the
memory one run adds over what is resident before it (like bench/common.hpp's memory_probe).

PyTorch: Debian's python3-torch, for Debian's interpreter (/usr/bin/python3). JAX: installed by
bench/run into a virtual environment under the build folder.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def parse(description, default_reps=11, quick_reps=3):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--framework", choices=["torch", "jax"], required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-header", action="store_true")
    ap.add_argument("--memory", default=None, help="one cold run of VARIANT; prints the MiB it adds")
    ap.add_argument("--size", default=None, help="(with --memory) the size to run")
    args = ap.parse_args()
    if args.reps is None:
        args.reps = quick_reps if args.quick else default_reps
    # Both frameworks use the first `threads` cores only; XLA's CPU client sizes its thread pool
    # from the affinity mask, PyTorch is also told directly.
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cpus[: max(1, args.threads)])
    return args


def load(framework):
    """The framework's module(s), or None (then the caller prints *_missing rows)."""
    try:
        if framework == "torch":
            import torch

            return torch
        import jax

        jax.config.update("jax_platforms", "cpu")
        return jax
    except ImportError:
        hint = ("apt-get install python3-torch; run with /usr/bin/python3" if framework == "torch"
                else "bench/run installs it into build/bench/venv")
        print(f"{framework} is not installed ({hint})", file=sys.stderr)
        return None


def version(framework):
    mod = load(framework)
    return getattr(mod, "__version__", "missing") if mod else "missing"


def interleaved(runs, reps):
    """runs: {variant: callable}. Each repetition runs every variant in a rotating order; returns
    {variant: [ms per repetition]}."""
    names = list(runs)
    times = {n: [] for n in names}
    for r in range(reps):
        for k in range(len(names)):
            n = names[(r + k) % len(names)]
            t0 = time.perf_counter()
            runs[n]()
            times[n].append((time.perf_counter() - t0) * 1e3)
    return times


def quantile(xs, q):
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1) + 0.5)]


def median(xs):
    return statistics.median(xs)


def _status_kib(field):
    with open("/proc/self/status") as f:
        return int(re.search(field + r":\s+(\d+)", f.read()).group(1))


class MemoryProbe:
    """The peak resident set during a run minus the resident set at its start (the kernel's
    high-water mark reset first through /proc/self/clear_refs)."""

    def __init__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        self.before = _status_kib("VmRSS")

    def added_mib(self):
        return (_status_kib("VmHWM") - self.before) / 1024.0


def memory_in_fresh_process(args, variant, size):
    """Runs this script again with --memory VARIANT --size SIZE; the MiB it printed, or nan."""
    cmd = [sys.executable, sys.argv[0], "--framework", args.framework, "--threads",
           str(args.threads), "--memory", variant, "--size", str(size)]
    if args.quick:
        cmd.append("--quick")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout.split()
        return float(out[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return float("nan")
