"""A user's dualcast kernel as a PyTorch operation (tests/python/kernels.hpp: softclip, a branch
per element, two outputs), loaded with dualcast.torch.load_library: gradients against central
differences (gradcheck, float64), bit-for-bit against dualcast's own apply / vjp, requires_grad
subsets, no_grad, strided and broadcast inputs, bad input."""

import itertools
import os
import unittest

from common import reference, require_torch

require_torch()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dualcast.torch as dct  # noqa: E402

ops = dct.load_library(os.environ["DUALCAST_TEST_KERNELS"])


def softclip_torch(x, t, s):
    """The same math in torch operations."""
    # (clamped: the branch not taken must not be NaN, or torch.where's gradient is)
    y = torch.where(x > t, t + s * torch.log(1 + (x - t).clamp(min=0) / s), x + 0 * t + 0 * s)
    return y, x * torch.exp(-s * x * x)


def inputs(gen, shapes=((3, 4), (4,), (3, 1)), dtype=torch.float64):
    # x at least 0.05 away from the threshold t on both sides: central differences then never
    # straddle the branch (a kink there).
    t = torch.rand(shapes[1], generator=gen, dtype=dtype) - 0.5
    side = torch.where(torch.rand(shapes[0], generator=gen) < 0.5, -1.0, 1.0).to(dtype)
    x = t + side * (0.05 + torch.rand(shapes[0], generator=gen, dtype=dtype))
    s = 0.5 + torch.rand(shapes[2], generator=gen, dtype=dtype)
    return x, t, s


class SoftclipTest(unittest.TestCase):
    def setUp(self):
        self.gen = torch.Generator().manual_seed(7)

    def test_gradcheck_broadcast_float64(self):
        x, t, s = (a.clone().requires_grad_() for a in inputs(self.gen))
        self.assertTrue(bool(((x > t) != (x < t)).all()))
        self.assertTrue(torch.autograd.gradcheck(ops.softclip, (x, t, s), eps=1e-6, atol=1e-8))

    def test_values_and_gradients_match_torch_math(self):
        x, t, s = (a.clone().requires_grad_() for a in inputs(self.gen))
        y, w = ops.softclip(x, t, s)
        self.assertEqual(y.shape, (3, 4))
        ry, rw = softclip_torch(x, t, s)
        torch.testing.assert_close(y, ry, rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(w, rw, rtol=1e-13, atol=1e-14)
        gy, gw = torch.randn(3, 4, generator=self.gen, dtype=torch.float64), \
            torch.randn(3, 4, generator=self.gen, dtype=torch.float64)
        g = torch.autograd.grad((y, w), (x, t, s), (gy, gw))
        rg = torch.autograd.grad((ry, rw), (x, t, s), (gy, gw))
        for a, b in zip(g, rg):
            self.assertEqual(a.shape, b.shape)  # broadcast inputs: summed to their own shapes
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)

    def test_bit_for_bit_with_dualcast(self):
        torch.set_num_threads(1)
        x, t, s = inputs(self.gen, shapes=((37, 19), (19,), (37, 1)))
        gy = torch.randn(37, 19, generator=self.gen, dtype=torch.float64)
        gw = torch.randn(37, 19, generator=self.gen, dtype=torch.float64)
        ref = reference("DUALCAST_TEST_KERNELS")
        args = [a.numpy() for a in (x, t, s)]
        want_y, want_w = ref.forward("softclip", args, 2)
        want_g = ref.vjp("softclip", args, [gy.numpy(), gw.numpy()], range(3))
        xs = [a.clone().requires_grad_() for a in (x, t, s)]
        y, w = ops.softclip(*xs)
        g = torch.autograd.grad((y, w), xs, (gy, gw))
        self.assertTrue(np.array_equal(y.detach().numpy(), want_y))
        self.assertTrue(np.array_equal(w.detach().numpy(), want_w))
        for name, a, want in zip("xts", g, want_g):
            self.assertTrue(np.array_equal(a.numpy(), want), name)

    def test_requires_grad_subsets(self):
        base = inputs(self.gen)
        full = [a.clone().requires_grad_() for a in base]
        y, w = ops.softclip(*full)
        (y.sum() + 2 * w.sum()).backward()
        for n in range(1, 4):
            for subset in itertools.combinations(range(3), n):
                xs = [a.clone().requires_grad_(i in subset) for i, a in enumerate(base)]
                y, w = ops.softclip(*xs)
                (y.sum() + 2 * w.sum()).backward()
                for i, a in enumerate(xs):
                    if i in subset:
                        torch.testing.assert_close(a.grad, full[i].grad, rtol=1e-14, atol=0)
                    else:
                        self.assertIsNone(a.grad)

    def test_no_grad(self):
        xs = [a.clone().requires_grad_() for a in inputs(self.gen)]
        with torch.no_grad():
            y, w = ops.softclip(*xs)
        self.assertFalse(y.requires_grad or w.requires_grad)
        y2, _ = ops.softclip(*xs)
        self.assertTrue(y2.requires_grad)
        torch.testing.assert_close(y, y2.detach(), rtol=0, atol=0)

    def test_strided_and_expanded_inputs(self):
        big = torch.randn(12, 10, generator=self.gen, dtype=torch.float64)
        x = big.t()[::2, ::3]  # non-contiguous, transposed
        t = torch.randn(4, generator=self.gen, dtype=torch.float64).expand(5, 4)  # stride 0
        s = (0.5 + torch.rand(5, 1, generator=self.gen, dtype=torch.float64))
        self.assertFalse(x.is_contiguous())
        self.assertEqual(t.stride(0), 0)
        xs = [a.detach().requires_grad_() for a in (x, t, s)]  # (detach keeps the strides)
        y, w = ops.softclip(*xs)
        cs = [a.detach().contiguous().requires_grad_() for a in xs]
        cy, cw = ops.softclip(*cs)
        torch.testing.assert_close(y, cy, rtol=1e-15, atol=0)
        torch.testing.assert_close(w, cw, rtol=1e-15, atol=0)
        g = torch.autograd.grad((y.sum() + w.sum()), xs)
        cg = torch.autograd.grad((cy.sum() + cw.sum()), cs)
        for a, b in zip(g, cg):
            torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-15)
        # the expanded input's gradient is per element of its (expanded) shape, as torch's
        self.assertEqual(g[1].shape, (5, 4))
        # gradcheck perturbs memory, so the stride-0 input is expanded inside the function
        tb = t[0].detach().clone().requires_grad_()
        self.assertTrue(torch.autograd.gradcheck(
            lambda x, tb, s: ops.softclip(x, tb.expand(5, 4), s), (xs[0], tb, xs[2]), eps=1e-6,
            atol=1e-8))

    def test_float32(self):
        x, t, s = (a.float() for a in inputs(self.gen))
        y, w = ops.softclip(x, t, s)
        self.assertEqual(y.dtype, torch.float32)
        ry, rw = softclip_torch(x.double(), t.double(), s.double())
        torch.testing.assert_close(y.double(), ry, rtol=1e-5, atol=1e-6)

    def test_docstring(self):
        self.assertIn("softclip(x, t, s)", ops.softclip.__doc__)
        self.assertIn("threshold", ops.softclip.__doc__)
        self.assertEqual(ops.names(), ["softclip"])

    def test_two_libraries_in_one_process(self):
        # each library lists only its own kernels (the registry is per library)
        h, c = dct.lstm_cell(*(torch.zeros(2, 3) for _ in range(5)))
        self.assertEqual(h.shape, (2, 3))
        self.assertEqual(ops.names(), ["softclip"])
        self.assertEqual(dct.load_library(os.environ["DUALCAST_TORCH_CELLS"]).names(),
                         ["lstm_cell", "gru_cell", "hmlstm_update"])

    def test_bad_input(self):
        x, t, s = inputs(self.gen)
        with self.assertRaisesRegex(TypeError, r"softclip takes 3 tensors \(x, t, s\), got 2"):
            ops.softclip(x, t)
        with self.assertRaisesRegex(RuntimeError, r"dualcast_tests::softclip: takes 3 arguments"):
            torch.ops.dualcast_tests.softclip([x, t])
        with self.assertRaisesRegex(RuntimeError, r"argument 1 \(t\) has dtype Float but"):
            ops.softclip(x, t.float(), s)
        with self.assertRaisesRegex(RuntimeError, r"argument 0 \(x\) has dtype Long"):
            ops.softclip(x.long(), t, s)
        with self.assertRaisesRegex(RuntimeError, r"softclip.*does not broadcast"):
            ops.softclip(x, torch.zeros(5, dtype=torch.float64), s)
        with self.assertRaisesRegex(RuntimeError, r"argument 2 \(s\) is on meta but argument 0 "
                                                  r"is on cpu"):
            ops.softclip(x, t, s.to("meta"))
        with self.assertRaisesRegex(RuntimeError, r"argument 0 \(x\) has layout Sparse"):
            ops.softclip(x.to_sparse(), t, s)
        with self.assertRaisesRegex(TypeError, r"argument 1 \(t\) is a float"):
            ops.softclip(x, 0.5, s)
        # the vjp operator is not differentiable: refused where autograd would record it
        with self.assertRaisesRegex(RuntimeError, r"the vjp of argument 0 \(x\) requires grad"):
            torch.ops.dualcast_tests.softclip_vjp([x.clone().requires_grad_(), t, s],
                                                  [x, x], 1)

    def test_raw_operator_and_meta(self):
        # the operator itself records its backward (C++ autograd kernel): usable without Python
        x, t, s = (a.clone().requires_grad_() for a in inputs(self.gen))
        y, w = torch.ops.dualcast_tests.softclip([x, t, s])
        (y.sum() + w.sum()).backward()
        x2, t2, s2 = (a.detach().clone().requires_grad_() for a in (x, t, s))
        y2, w2 = ops.softclip(x2, t2, s2)
        (y2.sum() + w2.sum()).backward()
        for a, b in ((x, x2), (t, t2), (s, s2)):
            self.assertTrue(torch.equal(a.grad, b.grad))
        # on the meta device: the outputs' shapes only (what fake tensors use)
        y, w = ops.softclip(torch.empty(3, 1, device="meta", dtype=torch.float64),
                            torch.empty(5, device="meta", dtype=torch.float64),
                            torch.empty(1, 5, device="meta", dtype=torch.float64))
        self.assertEqual((y.shape, y.device.type, w.shape), ((3, 5), "meta", (3, 5)))

    def test_inplace_modification_of_saved_input(self):
        x0, t, s = inputs(self.gen)
        leaf = x0.clone().requires_grad_()
        x = leaf * 1.0
        y, _ = ops.softclip(x, t, s)
        x.add_(1.0)  # the saved input changes before backward
        with self.assertRaisesRegex(RuntimeError, "modified by an inplace operation"):
            y.sum().backward()

    def test_double_backward_is_an_error(self):
        x, t, s = (a.clone().requires_grad_() for a in inputs(self.gen))
        y, w = ops.softclip(x, t, s)
        (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        self.assertTrue(gx.requires_grad)  # (a gradient penalty would not silently lose its term)
        with self.assertRaisesRegex(RuntimeError, r"dualcast op dualcast_tests::softclip: "
                                                  r"differentiating its gradient"):
            gx.sum().backward()
        # also where the cotangent itself requires grad
        cot = torch.ones(3, 4, dtype=torch.float64, requires_grad=True)
        (gx,) = torch.autograd.grad(y, x, cot, create_graph=True)
        with self.assertRaisesRegex(RuntimeError, "differentiating its gradient"):
            torch.autograd.grad(gx.sum(), cot)


if __name__ == "__main__":
    unittest.main(verbosity=2)
