"""The peer of bench/distributed: the demo's char-LSTM (examples/models/char_lstm.hpp, the same
operations as bench/peers/char_lstm.py's torch_eager) trained by PyTorch DistributedDataParallel
over Gloo on the CPU, one thread per process, each process its share of every global batch.

  ddp_char_lstm.py --ranks N [--hidden H] [--batch B] [--seq S] [--steps K]

Prints one line like the C++ example's: csv: torch_ddp_gloo,ranks,1,hidden,batch,seq,step_ms,nan
(the median time per step: forward, backward with DDP's overlapped all-reduces, Adam; the first
three steps excluded). Needs torch with torch.distributed and Gloo (Debian's python3-torch has it).
"""
import argparse
import os
import random
import statistics
import sys
import time

import char_lstm as peer


def worker(rank, args, port, out):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    text = peer.corpus()
    vocab = sorted(set(text))
    v, h, b, seq = len(vocab), args.hidden, args.batch, args.seq
    share = b // args.ranks

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(42)
            self.wx = torch.nn.Parameter(torch.randn(v, 4 * h, generator=g) * 0.1)
            lim = (6.0 / (h + 4 * h)) ** 0.5
            self.wh = torch.nn.Parameter((torch.rand(h, 4 * h, generator=g) * 2 - 1) * lim)
            bias = torch.zeros(4 * h)
            bias[h: 2 * h] = 1.0
            self.bias = torch.nn.Parameter(bias)
            lim = (6.0 / (h + v)) ** 0.5
            self.wy = torch.nn.Parameter((torch.rand(h, v, generator=g) * 2 - 1) * lim)
            self.by = torch.nn.Parameter(torch.zeros(v))

        def forward(self, idx, tgt):
            hh = torch.zeros(idx[0].shape[0], h)
            c = torch.zeros(idx[0].shape[0], h)
            hs = []
            for t in range(len(idx)):
                gates = self.wx.index_select(0, idx[t]) + hh @ self.wh + self.bias
                i, f, gg, o = gates.chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
                hh = torch.sigmoid(o) * torch.tanh(c)
                hs.append(hh)
            logits = torch.cat(hs, 0) @ self.wy + self.by
            logp = torch.log_softmax(logits, 1)
            return -logp.gather(1, tgt).mean()

    model = torch.nn.parallel.DistributedDataParallel(Model())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = random.Random(1)
    ids = {ch: k for k, ch in enumerate(vocab)}
    times = []
    for _ in range(args.steps):
        starts = [rng.randrange(0, len(text) - seq - 2) for _ in range(b)]
        mine = starts[rank * share: (rank + 1) * share]
        idx = [torch.tensor([ids[text[s + t]] for s in mine]) for t in range(seq)]
        tgt = torch.tensor([ids[text[s + t + 1]] for t in range(seq) for s in mine]).unsqueeze(1)
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(1e3 * (time.perf_counter() - t0))
    if rank == 0:
        step = statistics.median(times[3:])
        out.put(f"csv: torch_ddp_gloo,{args.ranks},1,{h},{b},{seq},{step:.4f},nan")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--steps", type=int, default=23)
    args = ap.parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError:
        print("torch_missing", file=sys.stderr)
        return 0
    if not dist.is_available() or not dist.is_gloo_available():
        print("torch_without_gloo", file=sys.stderr)
        return 0
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=worker, args=(r, args, port, out)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    line = out.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
