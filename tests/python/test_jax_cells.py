"""The ready cells from the package's own library (dualcast.jax.lstm_cell, gru_cell,
hmlstm_update): gradients against central finite differences (check_grads, float64, under jit),
the HM-LSTM update with its masks in every layout (B x H, B x 1, 1 x H, H, a scalar) and the masks
getting no gradient; values and cotangents bit for bit equal to dualcast's own apply / vjp (the
library's reference entries) in float32 and float64; the cells against the same math in jnp."""
import unittest

import jax_support

jax = jax_support.require_jax()
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import dualcast.jax as dj  # noqa: E402

ref = jax_support.Reference(jax_support.library("DUALCAST_JAX_CELLS"))
B, H = 5, 6
MASK_LAYOUTS = [(B, H), (B, 1), (1, H), (H,), ()]


def rand(shape, dtype=np.float64, seed=0, lo=-2.0, hi=2.0):
    return np.asarray(np.random.default_rng(seed).uniform(lo, hi, shape), dtype)


def mask(shape, seed):
    return np.asarray(np.random.default_rng(seed).integers(0, 2, shape), np.float64)


def lstm_jnp(i, f, g, o, c):
    c2 = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c2), c2


def hmlstm_jnp(z, zb, c, f, i, g):
    flush = jax.nn.sigmoid(i) * jnp.tanh(g)
    update = jax.nn.sigmoid(f) * c + flush
    return jnp.where(z == 1, flush, jnp.where((z == 0) & (zb == 0), c, update))


class Cells(unittest.TestCase):
    def test_lstm_check_grads(self):
        for c_shape in ((B, H), (H,), (B, 1)):
            with self.subTest(c=c_shape):
                args = [jnp.asarray(rand((B, H), seed=k)) for k in range(4)]
                args.append(jnp.asarray(rand(c_shape, seed=9)))
                check_grads(jax.jit(dj.lstm_cell), args, order=1, modes=["rev"])

    def test_lstm_matches_jnp(self):
        args = [jnp.asarray(rand((B, H), seed=k)) for k in range(5)]
        for got, exp in zip(dj.lstm_cell(*args), lstm_jnp(*args)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-14, atol=1e-15)
        loss = lambda f: lambda *a: jnp.sum(f(*a)[0] * f(*a)[1])  # noqa: E731
        g1 = jax.grad(loss(dj.lstm_cell), argnums=(0, 1, 2, 3, 4))(*args)
        g2 = jax.grad(loss(lstm_jnp), argnums=(0, 1, 2, 3, 4))(*args)
        for a, b in zip(g1, g2):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13, atol=1e-15)

    def test_gru_check_grads(self):
        args = [jnp.asarray(rand((B, H), seed=k)) for k in range(6)]
        args.append(jnp.asarray(rand((1, H), seed=7)))
        check_grads(jax.jit(dj.gru_cell), args, order=1, modes=["rev"])

    def test_hmlstm_check_grads_every_mask_layout(self):
        c, f, i, g = (jnp.asarray(rand((B, H), seed=k)) for k in range(4))
        for zl in MASK_LAYOUTS:
            for zbl in MASK_LAYOUTS:
                with self.subTest(z=zl, zb=zbl):
                    z, zb = jnp.asarray(mask(zl, 11)), jnp.asarray(mask(zbl, 12))
                    f_ = jax.jit(lambda c, f, i, g: dj.hmlstm_update(z, zb, c, f, i, g))
                    check_grads(f_, [c, f, i, g], order=1, modes=["rev"])
                    np.testing.assert_allclose(
                        np.asarray(dj.hmlstm_update(z, zb, c, f, i, g)),
                        np.asarray(hmlstm_jnp(z, zb, c, f, i, g)), rtol=1e-14, atol=1e-15)

    def test_hmlstm_masks_get_no_gradient(self):
        c, f, i, g = (jnp.asarray(rand((B, H), seed=k)) for k in range(4))
        z, zb = jnp.asarray(mask((B, 1), 1)), jnp.asarray(mask((1, H), 2))
        gz, gzb = jax.grad(lambda z, zb: jnp.sum(dj.hmlstm_update(z, zb, c, f, i, g)),
                           argnums=(0, 1))(z, zb)
        np.testing.assert_array_equal(np.asarray(gz), 0.0)
        np.testing.assert_array_equal(np.asarray(gzb), 0.0)
        # Integer and boolean masks are cast to the cell's float type.
        a = dj.hmlstm_update(np.asarray(z, np.int32), np.asarray(zb, bool), c, f, i, g)
        b = dj.hmlstm_update(z, zb, c, f, i, g)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    def test_bit_for_bit_with_dualcast(self):
        cases = [
            ("lstm_cell", dj.lstm_cell, [(B, H)] * 4 + [(1, H)], None, 2, [0, 1, 2, 3, 4]),
            ("gru_cell", dj.gru_cell, [(B, H)] * 6 + [(B, 1)], None, 1, list(range(7))),
        ] + [("hmlstm_update", dj.hmlstm_update, [zl, zbl] + [(B, H)] * 4, (zl, zbl), 1,
              [2, 3, 4, 5]) for zl in MASK_LAYOUTS for zbl in MASK_LAYOUTS[::2]]
        for dtype in (np.float32, np.float64):
            for name, op, shapes, masks, n_out, active in cases:
                with self.subTest(cell=name, dtype=dtype, shapes=shapes):
                    args = [rand(s, dtype, seed=k) for k, s in enumerate(shapes)]
                    if masks:
                        args[0], args[1] = (np.asarray(mask(m, 20 + k), dtype)
                                            for k, m in enumerate(masks))
                    shape = np.broadcast_shapes(*shapes)
                    cts = [rand(shape, dtype, seed=30 + k, lo=-1, hi=1) for k in range(n_out)]
                    outs, pull = jax.jit(lambda *a: jax.vjp(op, *a))(*args)
                    outs = outs if n_out > 1 else (outs,)
                    grads = jax.jit(pull)(tuple(cts) if n_out > 1 else cts[0])
                    grads = [grads[k] for k in active]
                    want = ref.forward(name, args, n_out) + ref.vjp(name, args, cts, active)
                    for got, exp in zip(list(outs) + grads, want):
                        self.assertEqual(np.asarray(got).dtype, dtype)
                        np.testing.assert_array_equal(np.asarray(got), exp)

    def test_float32_under_jit(self):
        args = [jnp.asarray(rand((B, H), np.float32, seed=k)) for k in range(5)]
        h, c2 = jax.jit(dj.lstm_cell)(*args)
        self.assertEqual((h.dtype, c2.dtype), (jnp.float32, jnp.float32))
        for got, exp in zip((h, c2), lstm_jnp(*args)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=2e-6, atol=2e-6)

    def test_vmap_over_a_batch_of_sequences(self):
        args = [jnp.asarray(rand((3, B, H), seed=k)) for k in range(5)]
        h, c2 = jax.vmap(dj.lstm_cell)(*args)
        for k in range(3):
            hk, ck = dj.lstm_cell(*(a[k] for a in args))
            np.testing.assert_array_equal(np.asarray(h[k]), np.asarray(hk))
            np.testing.assert_array_equal(np.asarray(c2[k]), np.asarray(ck))

    def test_docstrings(self):
        for op in (dj.lstm_cell, dj.gru_cell, dj.hmlstm_update):
            self.assertIn("fused", op.__doc__)


if __name__ == "__main__":
    unittest.main(verbosity=2)
