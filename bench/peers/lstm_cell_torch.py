"""PyTorch eager forward + backward of the LSTM cell update, the peer of bench/lstm_cell.cpp.

    c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c2)

Prints CSV rows (benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s) like the C++
benchmark; prints a row with variant torch_missing if PyTorch is not installed.
Debian's python3-torch installs for Debian's interpreter: run with /usr/bin/python3.
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-header", action="store_true")
    args = ap.parse_args()
    sizes = [(256, 256)] if args.quick else [(256, 256), (1024, 1024), (4096, 1024)]
    if not args.no_header:
        print("benchmark,variant,size,threads,median_ms,melem_per_s,gb_per_s")
    try:
        import torch
    except ImportError:
        for b, h in sizes:
            print(f"lstm_cell,torch_missing,{b}x{h},{args.threads},nan,nan,nan")
        print("PyTorch is not installed (Debian: apt-get install python3-torch; run with /usr/bin/python3)",
              file=sys.stderr)
        return
    torch.set_num_threads(args.threads)
    for b, h in sizes:
        n = b * h
        gen = torch.Generator().manual_seed(42)
        xs = [(torch.rand(b, h, generator=gen) * 4 - 2).requires_grad_() for _ in range(5)]
        hbar = torch.rand(b, h, generator=gen) * 4 - 2
        c2bar = torch.rand(b, h, generator=gen) * 4 - 2

        def step():
            for x in xs:
                x.grad = None
            i, f, g, o, c = xs
            c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            hh = torch.sigmoid(o) * torch.tanh(c2)
            torch.autograd.backward([hh, c2], [hbar, c2bar])

        step()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        ms = statistics.median(times)
        print(f"lstm_cell,torch_eager,{b}x{h},{args.threads},{ms:.3f},{n / ms / 1e3:.1f},{19 * 4 * n / ms / 1e6:.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
