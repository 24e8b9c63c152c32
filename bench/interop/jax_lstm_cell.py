"""The LSTM cell forward + backward as a dualcast operation inside JAX, beside the same kernel
called from C++ and the same math in JAX, float32, interleaved in one process.

    c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c2)

Variants (each: the values, then the five input cotangents for given output cotangents):
  jax_dualcast_op   jit(vjp) of dualcast.jax.lstm_cell: two XLA FFI calls (dualcast::apply, then
                    dualcast::vjp) in one XLA computation, outputs allocated by XLA
  cpp_fused_vjp     the same two passes called from C++ (the cells library's reference entry:
                    dualcast::apply + dualcast::vjp on preallocated NumPy arrays, through ctypes):
                    bench/lstm_cell.cpp's fused_vjp, plus a ctypes call
  jax_jit           the same math in jnp under jit(vjp) (bench/peers/lstm_cell.py's jax_jit)
  jax_dispatch_floor  jit of a function of the same 7 arguments returning one element: JAX's own
                    cost of one jitted call from Python, the floor under any operation's per-call
                    overhead (returning the arguments themselves would copy them)
  jax_dualcast_forward  jit of dualcast.jax.lstm_cell alone (one XLA FFI call, the values): one
                    call of the operation from Python, at the two small sizes only
  jax_op_overhead   (not a run) the median over repetitions of jax_dualcast_op - cpp_fused_vjp of
                    the same repetition: what calling through JAX adds per call
With --keep-freed-memory (variants suffixed _keepmem) glibc keeps freed blocks up to 32 MiB in
the heap (mallopt M_MMAP_THRESHOLD / M_TRIM_THRESHOLD, what GLIBC_TUNABLES=glibc.malloc.
mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296 does for a whole program). XLA on
the CPU allocates every output afresh; by default glibc serves blocks of several MiB by mmap and
returns them at free, so each call page-faults its outputs in again (at 4096 x 1024 the VJP's five
16 MiB outputs cost as much as the pass itself). The C++ variant writes into warm arrays.
Prints CSV rows benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s,added_mib
(bench/results/lstm_cell.csv's schema; gb_per_s counts the 19 arrays a two-pass fused forward +
VJP moves; added_mib: nan, not measured here).

    DUALCAST_JAX_CELLS=build/dualcast_jax_cells.so PYTHONPATH=python \\
      python bench/interop/jax_lstm_cell.py [--quick] [--threads N] [--reps N] [--no-header]
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=None)
ap.add_argument("--quick", action="store_true")
ap.add_argument("--no-header", action="store_true")
ap.add_argument("--keep-freed-memory", action="store_true")
args = ap.parse_args()
suffix = ""
if args.keep_freed_memory:
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    if not (libc.mallopt(M_MMAP_THRESHOLD, 32 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)):
        sys.exit("mallopt failed")
    suffix = "_keepmem"
reps = args.reps or (5 if args.quick else 31)
# Both sides on the first `threads` cores: XLA sizes its pool from the affinity mask, dualcast's
# OpenMP from OMP_NUM_THREADS (read when the library first runs).
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: max(1, args.threads)])
os.environ["OMP_NUM_THREADS"] = str(args.threads)

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import dualcast.jax as dj  # noqa: E402
from dualcast._reference import array_table  # noqa: E402


def cell_jnp(i, f, g, o, c):
    c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c2), c2


def fwd_bwd(cell):
    @jax.jit
    def run(xs, cot):
        outs, pull = jax.vjp(cell, *xs)
        return outs, pull(cot)

    return run


class CppRef:
    """dualcast_ref_lstm_cell (mode 0: apply, mode 1: vjp) on preallocated arrays."""

    def __init__(self, lib_path, xs, cots):
        self.fn = ctypes.CDLL(lib_path).dualcast_ref_lstm_cell
        n_shape = xs[0].shape
        self.h, self.c2 = np.empty(n_shape, np.float32), np.empty(n_shape, np.float32)
        self.bars = [np.empty(n_shape, np.float32) for _ in range(5)]
        self.err = ctypes.create_string_buffer(256)
        self.fwd = self._table(xs, [self.h, self.c2])
        self.bwd = self._table(list(xs) + list(cots), self.bars)

    @staticmethod
    def _table(ins, outs):
        (ip, ir, idim), (op, orank, od) = array_table(ins), array_table(outs)
        return (len(ins), ip, ir, idim, len(outs), op, orank, od)

    def __call__(self):
        for mode, (ni, ip, ir, idim, no, op, orank, od) in ((0, self.fwd), (1, self.bwd)):
            if self.fn(mode, 0, ni, ip, ir, idim, no, op, orank, od, self.err, 256) != 0:
                raise RuntimeError(self.err.value.decode())


def main():
    # 1 x 8: the per-call costs alone (more repetitions: microseconds).
    sizes = [(1, 8), (256, 256)] if args.quick else [(1, 8), (256, 256), (1024, 1024),
                                                      (4096, 1024)]
    floor = jax.jit(lambda xs, cot: xs[0][:1, :1])
    if not args.no_header:
        print("benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s,added_mib")
    ffi_run, jnp_run = fwd_bwd(dj.lstm_cell), fwd_bwd(cell_jnp)
    ffi_forward = jax.jit(dj.lstm_cell)
    for b, h in sizes:
        n = b * h
        rng = np.random.default_rng(42)
        xs_np = [np.asarray(rng.uniform(-2, 2, (b, h)), np.float32) for _ in range(5)]
        cots_np = [np.asarray(rng.uniform(-2, 2, (b, h)), np.float32) for _ in range(2)]
        xs, cots = [jnp.asarray(x) for x in xs_np], tuple(jnp.asarray(c) for c in cots_np)
        cpp = CppRef(dj._cells_library_path(), xs_np, cots_np)
        runs = {
            "jax_dualcast_op": lambda: jax.block_until_ready(ffi_run(xs, cots)),
            "cpp_fused_vjp": cpp,
            "jax_jit": lambda: jax.block_until_ready(jnp_run(xs, cots)),
            "jax_dispatch_floor": lambda: jax.block_until_ready(floor(xs, cots)),
        }
        if n <= 65536:
            runs["jax_dualcast_forward"] = lambda: jax.block_until_ready(ffi_forward(*xs))
        # The same numbers from the op and from C++ (a benchmark of a wrong result is no result).
        (oh, oc2), grads = ffi_run(xs, cots)
        cpp()
        assert np.array_equal(np.asarray(oh), cpp.h) and np.array_equal(np.asarray(grads[4]),
                                                                         cpp.bars[4])
        for r in runs.values():  # warm-up: compile, first-touch
            r(), r()
        names = list(runs)
        times = {k: [] for k in names}
        for rep in range(reps * 10 if n <= 65536 else reps):
            for k in range(len(names)):
                name = names[(rep + k) % len(names)]
                t0 = time.perf_counter()
                runs[name]()
                times[name].append((time.perf_counter() - t0) * 1e3)
        for name in names:
            ms = statistics.median(times[name])
            print(f"lstm_cell,{name}{suffix},{b}x{h},{args.threads},{ms:.4f},{n / ms / 1e3:.1f},"
                  f"{19 * 4 * n / ms / 1e6:.2f},nan")
        diff = statistics.median(a - c for a, c in zip(times["jax_dualcast_op"],
                                                        times["cpp_fused_vjp"]))
        print(f"lstm_cell,jax_op_overhead{suffix},{b}x{h},{args.threads},{diff:.4f},nan,nan,nan")
        # Paired ratios (same repetition), on stderr: what the targets are stated in.
        op_cpp = statistics.median(a / c for a, c in zip(times["jax_dualcast_op"],
                                                         times["cpp_fused_vjp"]))
        jit_op = statistics.median(j / a for a, j in zip(times["jax_dualcast_op"],
                                                         times["jax_jit"]))
        print(f"# {b}x{h}, {args.threads} threads{suffix}: op / C++ {op_cpp:.3f} (target <= 1.15), "
              f"jax_jit / op {jit_op:.2f} (target >= 5), overhead {diff * 1e3:.1f} us"
              + (f", forward alone {statistics.median(times['jax_dualcast_forward']) * 1e3:.1f} us"
                 f" (dispatch floor {statistics.median(times['jax_dispatch_floor']) * 1e3:.1f} us)"
                 if "jax_dualcast_forward" in times else ""),
              file=sys.stderr)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
