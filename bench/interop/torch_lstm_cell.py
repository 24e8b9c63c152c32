"""The LSTM cell forward + backward as a PyTorch operation (dualcast.torch.lstm_cell under
autograd) beside the same kernel called from C++ in the same process, and PyTorch eager, float32,
interleaved repetitions, medians.

  dualcast_torch_op    dct.lstm_cell(i, f, g, o, c) and torch.autograd.backward([h, c'], cot):
                       the forward operator, then the vjp operator with all five inputs
                       (outputs and gradients allocated by torch per call)
  dualcast_torch_raw   the two operators called directly (no autograd.Function): what the
                       Function and autograd add is the difference to dualcast_torch_op
  cpp_fused_vjp        dualcast::apply + dualcast::vjp from C++ into arrays allocated once
                       (bench/lstm_cell.cpp's fused_vjp; bench/interop/torch_cpp_lstm.cpp),
                       timed in C++
  torch_eager          the same math in torch operations, autograd.backward
  torch_autograd_floor one built-in differentiable operation over the same five inputs
                       (torch.cat) and autograd.backward into their five gradients: what torch
                       charges per call for a forward + backward with five leaves, its own
                       operations included -- the floor under an operation's per-call overhead
  torch_compile        the same function compiled by torch.compile (torch >= 2: Inductor's
                       generated C++ forward and backward; its compile time on stderr, apart)
The per-call overhead is dualcast_torch_op - cpp_fused_vjp at 8 x 8 and 256 x 256 (printed on
stderr), beside torch_autograd_floor. --cpu-clock times every variant by the calling thread's
CPU time (time.thread_time; torch runs a CPU backward on the calling thread), cpp_fused_vjp
included (then with its torch.ops call from Python): on a shared machine the wall clock of an
8 x 8 call mostly measures the other processes. At large sizes torch's CPU allocator hands each call fresh pages when glibc returns freed
memory to the system (page faults in every output and gradient, for the torch variants only):
MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ (glibc tunables) show how much.
nn.LSTMCell is not measured: on the CPU it has no separate cell part (its gates come from its own
matmuls; torch fuses the cell only on CUDA, _thnn_fused_lstm_cell), so nothing comparable.

CSV rows (bench/results/lstm_cell.csv's schema): benchmark,variant,size,threads,median_ms,
melem_per_s,gb_per_s,added_mib (gb_per_s counts the 19 arrays a fused forward + VJP moves;
added_mib is not measured here: nan). Then, on stderr, the ratios the targets name.

  PYTHONPATH=python DUALCAST_TORCH_CELLS=<_torch_cells.so> /usr/bin/python3 \\
      bench/interop/torch_lstm_cell.py --cpp-lib <dualcast_torch_bench.so> [--threads 2]
      [--reps 31] [--quick] [--no-header]
"""
import argparse
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpp-lib", required=True, help="the dualcast_torch_bench library")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=31)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-header", action="store_true")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="time by the thread's CPU time (with --threads 1), see above")
    ap.add_argument("--sizes", default=None,
                    help="comma-separated BxH (default 8x8,256x256,1024x1024,4096x1024)")
    ap.add_argument("--no-compile", action="store_true",
                    help="leave out torch.compile (torch >= 2 only; compiling takes a minute)")
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cpus[: max(1, a.threads)])

    import torch

    import dualcast.torch as dct

    torch.set_num_threads(a.threads)
    compiled_cell = None
    if hasattr(torch, "compile") and not a.no_compile:
        def cell(i, f, g, o, c):
            c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c2), c2

        # dynamic=False: one specialised kernel per size, as a user's fixed-size model gets
        compiled_cell = torch.compile(cell, dynamic=False)
    torch.ops.load_library(a.cpp_lib)
    # 8 x 8: the per-call overhead alone (the kernels' work is negligible there)
    sizes = [(8, 8), (256, 256)] if a.quick else [(8, 8), (256, 256), (1024, 1024), (4096, 1024)]
    if a.sizes:
        sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    clock = time.thread_time if a.cpu_clock else time.perf_counter
    reps = 5 if a.quick else a.reps
    if not a.no_header:
        print("benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s,added_mib")
    for b, h in sizes:
        gen = torch.Generator().manual_seed(42)
        base = [torch.rand(b, h, generator=gen) * 4 - 2 for _ in range(5)]
        hbar, cbar = (torch.rand(b, h, generator=gen) * 4 - 2 for _ in range(2))
        xs = [x.clone().requires_grad_() for x in base]

        def op():
            for x in xs:
                x.grad = None
            hh, c2 = dct.lstm_cell(*xs)
            torch.autograd.backward([hh, c2], [hbar, cbar])

        def raw():
            torch.ops.dualcast.lstm_cell(base)
            torch.ops.dualcast.lstm_cell_vjp(base, [hbar, cbar], 31)

        outs = [torch.empty(b, h) for _ in range(2)]
        grads = [torch.empty(b, h) for _ in range(5)]
        cpp_times = []

        def cpp():
            cpp_times.append(torch.ops.dualcast_bench.lstm_cell_cpp(base, outs, [hbar, cbar],
                                                                   grads, 1)[0])

        def eager():
            for x in xs:
                x.grad = None
            i, f, g, o, c = xs
            c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            hh = torch.sigmoid(o) * torch.tanh(c2)
            torch.autograd.backward([hh, c2], [hbar, cbar])

        # the gradients agree (the comparison is of the same computation)
        op()
        ref = [x.grad.clone() for x in xs]
        eager()
        for r, x in zip(ref, xs):
            torch.testing.assert_close(r, x.grad, rtol=1e-4, atol=1e-5)

        catbar = torch.cat([hbar] * 5)

        def floor():
            for x in xs:
                x.grad = None
            torch.autograd.backward([torch.cat(xs)], [catbar])

        variants = {"dualcast_torch_op": op, "dualcast_torch_raw": raw, "cpp_fused_vjp": cpp,
                    "torch_eager": eager, "torch_autograd_floor": floor}
        if b * h <= 256 * 256:
            variants["dualcast_torch_forward"] = lambda: dct.lstm_cell(*xs)
            variants["torch_forward_floor"] = lambda: torch.cat(xs)
        if compiled_cell is not None:
            # torch.compile (Inductor's generated C++ for the forward and the backward); its
            # compile is warm-up, timed apart on stderr
            def compiled():
                for x in xs:
                    x.grad = None
                torch.autograd.backward(list(compiled_cell(*xs)), [hbar, cbar])

            t0 = time.perf_counter()
            compiled()
            print("%dx%d: torch.compile's first call (compiling) %.1f s"
                  % (b, h, time.perf_counter() - t0), file=sys.stderr)
            for r, x in zip(ref, xs):
                torch.testing.assert_close(r, x.grad, rtol=1e-4, atol=1e-5)
            variants["torch_compile"] = compiled
        # small sizes: several calls per sample, so that the clock's resolution does not matter
        inner = max(1, min(200, int(2e5 // (b * h))))
        times = {k: [] for k in variants}
        for fn in variants.values():  # warm up (first touch of pages, allocator)
            fn()
        cpp_times.clear()
        for _ in range(reps):
            for name, fn in variants.items():
                t0 = clock()
                for _ in range(inner):
                    fn()
                times[name].append((clock() - t0) / inner)
        if not a.cpu_clock:  # cpp_fused_vjp: its own C++ clock (without the Python call)
            times["cpp_fused_vjp"] = [sum(cpp_times[k * inner:(k + 1) * inner]) / inner
                                      for k in range(reps)]
        med = {k: statistics.median(v) for k, v in times.items()}
        n = b * h
        for name, t in med.items():
            print("lstm_cell,%s,%dx%d,%d,%.4f,%.1f,%.2f,nan"
                  % (name, b, h, a.threads, t * 1e3, n / t / 1e6, 19 * 4 * n / t / 1e9))
        # paired ratios (same repetition), medians
        def ratio(x, y):
            return statistics.median(p / q for p, q in zip(times[x], times[y]))
        print("%dx%d: op/cpp %.3f, eager/op %.2f, op - cpp %.1f us, raw - cpp %.1f us, "
              "autograd floor %.1f us, op - cpp - floor %.1f us%s"
              % (b, h, ratio("dualcast_torch_op", "cpp_fused_vjp"),
                 ratio("torch_eager", "dualcast_torch_op"),
                 (med["dualcast_torch_op"] - med["cpp_fused_vjp"]) * 1e6,
                 (med["dualcast_torch_raw"] - med["cpp_fused_vjp"]) * 1e6,
                 med["torch_autograd_floor"] * 1e6,
                 (med["dualcast_torch_op"] - med["cpp_fused_vjp"]
                  - med["torch_autograd_floor"]) * 1e6,
                 ", torch_compile/op %.2f" % ratio("torch_compile", "dualcast_torch_op")
                 if "torch_compile" in times else ""), file=sys.stderr)
        if "dualcast_torch_forward" in med:
            print("%dx%d: forward alone %.1f us (torch.cat of the five inputs %.1f us)"
                  % (b, h, med["dualcast_torch_forward"] * 1e6,
                     med["torch_forward_floor"] * 1e6), file=sys.stderr)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
