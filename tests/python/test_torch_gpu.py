"""CPU == GPU for the ready cells and a user kernel as PyTorch operations (label gpu). Reports
skipped without a CUDA device or where the libraries were built without CUDA (a CPU-only torch,
or no nvcc at build time)."""

import os
import unittest

from common import require_torch, skip

require_torch()

import torch  # noqa: E402

import dualcast.torch as dct  # noqa: E402

if not torch.cuda.is_available():
    skip("no CUDA device visible to torch %s" % torch.__version__)
if not os.environ.get("DUALCAST_TORCH_CELLS", "").endswith(".so") or \
        not torch.version.cuda:
    skip("torch without CUDA")

ops = dct.load_library(os.environ["DUALCAST_TEST_KERNELS"])


class GpuTest(unittest.TestCase):
    def check(self, fn, cpu_args, rtol, atol):
        gpu_args = [a.detach().cuda().requires_grad_(a.requires_grad) for a in cpu_args]
        out_c, out_g = fn(*cpu_args), fn(*gpu_args)
        out_c = out_c if isinstance(out_c, tuple) else (out_c,)
        out_g = out_g if isinstance(out_g, tuple) else (out_g,)
        for a, b in zip(out_c, out_g):
            torch.testing.assert_close(b.cpu(), a.detach(), rtol=rtol, atol=atol)
        cot = [torch.randn_like(a) for a in out_c]
        gc = torch.autograd.grad(out_c, [a for a in cpu_args if a.requires_grad], cot)
        gg = torch.autograd.grad(out_g, [a for a in gpu_args if a.requires_grad],
                                 [c.cuda() for c in cot])
        for a, b in zip(gc, gg):
            torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=atol)

    def test_lstm_cell(self):
        for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
            xs = [torch.randn(64, 96, dtype=dtype).requires_grad_() for _ in range(4)] + \
                 [torch.randn(1, 96, dtype=dtype).requires_grad_()]
            self.check(dct.lstm_cell, xs, tol, tol)

    def test_hmlstm_update(self):
        z = (torch.rand(64, 1) < 0.3).double()
        zb = (torch.rand(96) < 0.5).double()
        xs = [torch.randn(64, 96, dtype=torch.float64).requires_grad_() for _ in range(4)]
        self.check(lambda *a: dct.hmlstm_update(a[0], a[1], *a[2:]), [z, zb] + xs, 1e-12, 1e-12)

    def test_softclip_and_stream(self):
        x = torch.randn(300, 7, dtype=torch.float64).requires_grad_()
        t = torch.randn(7, dtype=torch.float64).requires_grad_()
        s = (0.5 + torch.rand(300, 1, dtype=torch.float64)).requires_grad_()
        self.check(ops.softclip, [x, t, s], 1e-12, 1e-12)
        # on a side stream: the operation runs on torch's current stream
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            y, _ = ops.softclip(x.detach().cuda(), t.detach().cuda(), s.detach().cuda())
        side.synchronize()
        torch.testing.assert_close(y.cpu(), ops.softclip(x, t, s)[0].detach(), rtol=1e-12,
                                   atol=1e-12)

    def test_device_mismatch(self):
        with self.assertRaisesRegex(RuntimeError, r"argument 1 \(t\) is on cpu but argument 0"):
            ops.softclip(torch.zeros(3).cuda(), torch.zeros(3), torch.ones(3).cuda())


if __name__ == "__main__":
    unittest.main(verbosity=2)
