"""The ready cells as PyTorch operations (dualcast.torch.lstm_cell, gru_cell, hmlstm_update):
gradcheck in float64 (the HM-LSTM update with its masks in every layout), bit for bit against
dualcast's own apply / vjp, masks never differentiated, and a small model with one dualcast
operation among torch operations against the same model in torch operations alone."""

import itertools
import unittest

from common import reference, require_torch

require_torch()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dualcast.torch as dct  # noqa: E402

D = torch.float64


def lstm_torch(i, f, g, o, c):
    c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c2), c2


def gru_torch(xr, xz, xn, hr, hz, hn, h):
    r = torch.sigmoid(xr + hr)
    z = torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def hmlstm_torch(z, zb, c, f, i, g):
    upd = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    flush = torch.sigmoid(i) * torch.tanh(g)
    return torch.where(z == 1, flush, torch.where((z == 0) & (zb == 0), c + 0 * upd, upd))


class CellsTest(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator().manual_seed(11)

    def rand(self, *shape, dtype=D):
        return torch.randn(*shape, generator=self.gen, dtype=dtype)

    def test_lstm_gradcheck_with_broadcast_state(self):
        xs = [self.rand(3, 5).requires_grad_() for _ in range(4)] + \
             [self.rand(1, 5).requires_grad_()]
        self.assertTrue(torch.autograd.gradcheck(dct.lstm_cell, xs, eps=1e-6, atol=1e-8))
        h, c = dct.lstm_cell(*xs)
        rh, rc = lstm_torch(*xs)
        torch.testing.assert_close(h, rh, rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(c, rc, rtol=1e-13, atol=1e-14)

    def test_gru_gradcheck(self):
        xs = [self.rand(2, 4).requires_grad_() for _ in range(7)]
        self.assertTrue(torch.autograd.gradcheck(dct.gru_cell, xs, eps=1e-6, atol=1e-8))
        torch.testing.assert_close(dct.gru_cell(*xs), gru_torch(*xs), rtol=1e-13, atol=1e-14)
        # above 5 differentiable inputs the vjp runs all-active: a subset still gets only its own
        xs2 = [a.detach().clone().requires_grad_(k in (1, 6)) for k, a in enumerate(xs)]
        dct.gru_cell(*xs2).sum().backward()
        g = torch.autograd.grad(gru_torch(*xs).sum(), [xs[1], xs[6]])
        torch.testing.assert_close(xs2[1].grad, g[0], rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(xs2[6].grad, g[1], rtol=1e-13, atol=1e-14)
        self.assertTrue(all(xs2[k].grad is None for k in (0, 2, 3, 4, 5)))

    def masks(self, layout, B=4, H=6):
        """Masks z, zb in one layout; every branch (FLUSH, COPY, UPDATE) is taken somewhere
        where the masks vary."""
        if layout == "full":
            z = torch.tensor([1, 0, 0, 1, 0, 0] * B * H, dtype=D)[: B * H].reshape(B, H)
            zb = torch.tensor([0, 0, 1, 1, 1, 0] * B * H, dtype=D)[: B * H].reshape(B, H)
        elif layout == "rows":      # one mask value per batch row, broadcast over H
            z = torch.tensor([1, 0, 0, 0], dtype=D).reshape(B, 1)
            zb = torch.tensor([0, 0, 1, 0], dtype=D).reshape(B, 1)
        elif layout == "columns":   # per unit, broadcast over the batch
            z = torch.tensor([1, 0, 0, 1, 0, 0], dtype=D)
            zb = torch.tensor([1, 0, 1, 0, 1, 0], dtype=D)
        elif layout == "scalar":    # 0-d masks: one branch for all (COPY here)
            z = torch.tensor(0.0, dtype=D)
            zb = torch.tensor(0.0, dtype=D)
        elif layout == "expanded":  # stride-0 views of a row
            z = torch.tensor([1, 0, 0, 1, 0, 0], dtype=D).expand(B, H)
            zb = torch.tensor([0, 0, 1, 1, 1, 0], dtype=D).expand(B, H)
        return z, zb

    def test_hmlstm_gradcheck_masks_in_every_layout(self):
        for layout in ("full", "rows", "columns", "scalar", "expanded"):
            with self.subTest(layout=layout):
                z, zb = self.masks(layout)
                xs = [self.rand(4, 6).requires_grad_() for _ in range(4)]
                self.assertTrue(torch.autograd.gradcheck(
                    lambda *a: dct.hmlstm_update(z, zb, *a), xs, eps=1e-6, atol=1e-8))
                torch.testing.assert_close(dct.hmlstm_update(z, zb, *xs),
                                           hmlstm_torch(z, zb, *xs), rtol=1e-13, atol=1e-14)

    def test_hmlstm_masks_not_differentiated(self):
        z, zb = (m.clone().requires_grad_() for m in self.masks("full"))
        xs = [self.rand(4, 6).requires_grad_() for _ in range(4)]
        dct.hmlstm_update(z, zb, *xs).sum().backward()
        self.assertIsNone(z.grad)
        self.assertIsNone(zb.grad)
        self.assertTrue(all(a.grad is not None for a in xs))

    def test_bit_for_bit_with_dualcast(self):
        torch.set_num_threads(1)
        xs = [self.rand(9, 33) for _ in range(4)] + [self.rand(1, 33)]
        gh, gc = self.rand(9, 33), self.rand(9, 33)
        ref = reference("DUALCAST_TORCH_CELLS")
        args = [a.numpy() for a in xs]
        want_h, want_c = ref.forward("lstm_cell", args, 2)
        want_g = ref.vjp("lstm_cell", args, [gh.numpy(), gc.numpy()], range(5))
        leaves = [a.clone().requires_grad_() for a in xs]
        h, c = dct.lstm_cell(*leaves)
        grads = torch.autograd.grad((h, c), leaves, (gh, gc))
        self.assertTrue(np.array_equal(h.detach().numpy(), want_h))
        self.assertTrue(np.array_equal(c.detach().numpy(), want_c))
        for name, g, want in zip("ifgoc", grads, want_g):
            self.assertTrue(np.array_equal(g.numpy(), want), name)

        xs = [self.rand(9, 33) for _ in range(6)] + [self.rand(9, 1)]
        gh = self.rand(9, 33)
        args = [a.numpy() for a in xs]
        (want_h,) = ref.forward("gru_cell", args, 1)
        want_g = ref.vjp("gru_cell", args, [gh.numpy()], range(7))
        leaves = [a.clone().requires_grad_() for a in xs]
        h = dct.gru_cell(*leaves)
        grads = torch.autograd.grad(h, leaves, gh)
        self.assertTrue(np.array_equal(h.detach().numpy(), want_h))
        for name, g, want in zip(("x_r", "x_z", "x_n", "h_r", "h_z", "h_n", "h"), grads, want_g):
            self.assertTrue(np.array_equal(g.numpy(), want), name)

        z, zb = self.masks("full", 9, 33)
        xs = [self.rand(9, 33) for _ in range(4)]
        gc = self.rand(9, 33)
        args = [z.numpy(), zb.numpy()] + [a.numpy() for a in xs]
        (want_c,) = ref.forward("hmlstm_update", args, 1)
        want_g = ref.vjp("hmlstm_update", args, [gc.numpy()], [2, 3, 4, 5])
        leaves = [a.clone().requires_grad_() for a in xs]
        c2 = dct.hmlstm_update(z, zb, *leaves)
        grads = torch.autograd.grad(c2, leaves, gc)
        self.assertTrue(np.array_equal(c2.detach().numpy(), want_c))
        for name, g, want in zip("cfig", grads, want_g):
            self.assertTrue(np.array_equal(g.numpy(), want), name)

    def test_lstm_requires_grad_subsets(self):
        base = [self.rand(3, 4) for _ in range(5)]
        ref = torch.autograd.grad(sum(t.sum() for t in lstm_torch(*[a.requires_grad_() for a in
                                                                    base])), base)
        for n in (1, 2, 4, 5):
            for subset in itertools.combinations(range(5), n):
                xs = [a.detach().clone().requires_grad_(k in subset) for k, a in enumerate(base)]
                h, c = dct.lstm_cell(*xs)
                (h.sum() + c.sum()).backward()
                for k, a in enumerate(xs):
                    if k in subset:
                        torch.testing.assert_close(a.grad, ref[k], rtol=1e-13, atol=1e-14)
                    else:
                        self.assertIsNone(a.grad)

    def test_mixed_model_against_torch_only(self):
        """A one-layer LSTM classifier: torch's Linear for the gates, dualcast's cell for the
        update, torch's loss, over 5 time steps; the same model in torch ops alone."""
        torch.manual_seed(3)
        B, I, H, T = 4, 3, 8, 5
        lin = torch.nn.Linear(I + H, 4 * H).double()
        head = torch.nn.Linear(H, 2).double()
        x = torch.randn(T, B, I, dtype=D)
        y = torch.randint(0, 2, (B,))

        def run(cell):
            h = torch.zeros(B, H, dtype=D)
            c = torch.zeros(B, H, dtype=D)
            for t in range(T):
                i, f, g, o = lin(torch.cat([x[t], h], 1)).chunk(4, 1)  # non-contiguous gates
                h, c = cell(i, f, g, o, c)
            return torch.nn.functional.cross_entropy(head(h), y)

        params = list(lin.parameters()) + list(head.parameters())
        loss = run(dct.lstm_cell)
        g = torch.autograd.grad(loss, params)
        rloss = run(lstm_torch)
        rg = torch.autograd.grad(rloss, params)
        torch.testing.assert_close(loss, rloss, rtol=1e-13, atol=1e-14)
        for a, b in zip(g, rg):
            torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13)

    def test_docstrings(self):
        self.assertIn("lstm_cell(i, f, g, o, c)", dct.lstm_cell.__doc__)
        self.assertIn("not differentiated", dct.hmlstm_update.__doc__)


if __name__ == "__main__":
    unittest.main(verbosity=2)
