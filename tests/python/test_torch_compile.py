"""dualcast operators under torch >= 2.4's compiler stack: torch.library.opcheck (schema, fake
tensors, autograd registration, AOT dispatch), torch.compile(fullgraph=True) of a function and of
a model holding them (values and gradients equal eager's), and what torch.compile does with a
double backward (the same error as eager). Reports skipped on an older torch (Debian's 1.13 has
no torch.compile)."""

import os
import unittest

from common import require_torch, skip

require_torch()

import torch  # noqa: E402

if not hasattr(torch, "library") or not hasattr(torch.library, "opcheck"):
    skip("torch %s has no torch.library.opcheck / torch.compile (2.4 or newer needed)"
         % torch.__version__)

import dualcast.torch as dct  # noqa: E402

from test_torch_ops import inputs, softclip_torch  # noqa: E402

ops = dct.load_library(os.environ["DUALCAST_TEST_KERNELS"])
D = torch.float64


def lstm_torch(i, f, g, o, c):
    c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c2), c2


class CompileTest(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()
        self.gen = torch.Generator().manual_seed(5)

    def test_opcheck_forward_and_vjp_operators(self):
        """opcheck runs each operator under fake tensors, checks its schema against what it
        does (no hidden mutation or aliasing), its autograd registration and AOT dispatch."""
        x, t, s = inputs(self.gen)
        xs = [a.clone().requires_grad_() for a in (x, t, s)]
        torch.library.opcheck(torch.ops.dualcast_tests.softclip.default, (xs,))
        gy = torch.randn(3, 4, generator=self.gen, dtype=D)
        torch.library.opcheck(torch.ops.dualcast_tests.softclip_vjp.default,
                              ([x, t, s], [gy, gy], 7),
                              test_utils=("test_schema", "test_faketensor",
                                          "test_aot_dispatch_static"))
        c = [torch.randn(2, 3, generator=self.gen, dtype=D).requires_grad_() for _ in range(5)]
        torch.library.opcheck(torch.ops.dualcast.lstm_cell.default, (c,))

    def test_compiled_function_matches_eager(self):
        def f(x, t, s):
            y, w = ops.softclip(x * 1.5, t, s)
            return (torch.tanh(y) * w).sum() + y.square().mean()

        cf = torch.compile(f, fullgraph=True, backend="aot_eager")
        base = inputs(self.gen, shapes=((6, 5), (5,), (6, 1)))
        xs = [a.clone().requires_grad_() for a in base]
        cs = [a.clone().requires_grad_() for a in base]
        loss = f(*xs)
        closs = cf(*cs)
        torch.testing.assert_close(closs, loss, rtol=0, atol=0)
        loss.backward()
        closs.backward()
        for a, b in zip(cs, xs):
            torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
        # against the same math in torch operations, compiled by Inductor (which generates and
        # compiles its own C++): the dualcast operator is a graph node Inductor calls
        rs = [a.clone().requires_grad_() for a in base]
        rf = torch.compile(
            lambda x, t, s: (lambda y, w: (torch.tanh(y) * w).sum() + y.square().mean())(
                *softclip_torch(x * 1.5, t, s)))
        rf(*rs).backward()
        ic = [a.clone().requires_grad_() for a in base]
        torch.compile(f, fullgraph=True)(*ic).backward()
        for a, b in zip(ic, rs):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-13)

    def test_compiled_lstm_model_trains_as_eager(self):
        """A one-layer LSTM over 4 steps with dualcast's cell, compiled by Inductor
        (fullgraph), two SGD steps: the losses and parameters of eager, and of the cell written
        in torch operations."""
        torch.manual_seed(3)
        B, I, H, T = 4, 3, 8, 4

        class Model(torch.nn.Module):
            def __init__(self, cell):
                super().__init__()
                self.lin = torch.nn.Linear(I + H, 4 * H).double()
                self.head = torch.nn.Linear(H, 2).double()
                self.cell = cell

            def forward(self, x, y):
                h = x.new_zeros(B, H)
                c = x.new_zeros(B, H)
                for t in range(T):
                    i, f, g, o = self.lin(torch.cat([x[t], h], 1)).chunk(4, 1)
                    h, c = self.cell(i, f, g, o, c)
                return torch.nn.functional.cross_entropy(self.head(h), y)

        x = torch.randn(T, B, I, dtype=D)
        y = torch.randint(0, 2, (B,))
        models = [Model(dct.lstm_cell), Model(dct.lstm_cell), Model(lstm_torch)]
        for m in models[1:]:
            m.load_state_dict(models[0].state_dict())
        runs = [models[0], torch.compile(models[1], fullgraph=True), models[2]]
        opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in models]
        losses = [[], [], []]
        for _ in range(2):
            for k, (run, opt) in enumerate(zip(runs, opts)):
                opt.zero_grad()
                loss = run(x, y)
                loss.backward()
                opt.step()
                losses[k].append(loss.item())
        # (Inductor compiles the torch operations around the cell its own way: the last bits
        # of the linear layers and the loss may differ from eager's)
        for a, b, c in zip(losses[0], losses[1], losses[2]):
            self.assertAlmostEqual(b, a, delta=1e-13)
            self.assertAlmostEqual(c, a, delta=1e-12)
        self.assertLess(losses[1][1], losses[1][0])  # it trains
        for a, b in zip(models[1].parameters(), models[0].parameters()):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)

    def test_compiled_double_backward_is_an_error(self):
        def penalty(x, t, s):
            y, _ = ops.softclip(x, t, s)
            (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            return gx.square().sum()

        xs = [a.clone().requires_grad_() for a in inputs(self.gen)]
        # an error either way, never a silently missing term: ours where the second backward
        # reaches the operator's gradient, or torch.compile's own refusal of double backward
        with self.assertRaisesRegex(RuntimeError, "differentiating its gradient|"
                                                  "does not currently support double backward"):
            torch.compile(penalty)(*xs).backward()


if __name__ == "__main__":
    unittest.main(verbosity=2)
