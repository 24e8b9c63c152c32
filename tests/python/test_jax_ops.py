"""A user's kernels (tests/python/jax_test_kernels.cpp) as JAX operations: gradients against
central finite differences (jax.test_util.check_grads, float64, under jit) with a data-dependent
branch and broadcast inputs; values and cotangents bit for bit equal to dualcast's own apply / vjp
on the same data (float32 and float64); vmap; jvp refused clearly; non-differentiated inputs;
bad input (dtype, shape, argument count, and the C++ handler's own checks); the FFI version check
at load."""
import os
import shutil
import tempfile
import unittest

import jax_support

jax = jax_support.require_jax()
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import dualcast.jax as dj  # noqa: E402

LIB = jax_support.library("DUALCAST_JAX_TEST_KERNELS")
ops = dj.load_library(LIB, arg_names={"branchy": ["x", "w", "b"], "scaled": ["x", "s"]})
ref = jax_support.Reference(LIB)

# Shapes of (x, w, b): full, row / column broadcasts, a scalar, lower rank.
LAYOUTS = [((4, 5), (4, 5), (4, 5)), ((4, 5), (5,), (4, 1)), ((3, 4, 5), (1, 4, 1), ()),
           ((6,), (1,), (6,))]


def inputs(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for k, s in enumerate(shapes):
        a = rng.uniform(-2, 2, s)
        if k == 0:  # x: both branches, never within 0.1 of the branch point (finite differences)
            a = np.where(np.abs(a) < 0.1, a + 0.3, a)
        out.append(np.asarray(a, dtype))
    return out


class UserKernel(unittest.TestCase):
    def test_check_grads_float64_jit(self):
        for shapes in LAYOUTS:
            with self.subTest(shapes=shapes):
                args = [jnp.asarray(a) for a in inputs(shapes, np.float64)]
                f = jax.jit(lambda x, w, b: ops.branchy(x, w, b))
                check_grads(f, args, order=1, modes=["rev"], atol=1e-6, rtol=1e-6)
                both = jax.jit(lambda x, w, b: sum(jnp.sum(y * y) for y in ops.branchy(x, w, b)))
                check_grads(both, args, order=1, modes=["rev"], atol=1e-6, rtol=1e-6)

    def test_bit_for_bit_with_dualcast(self):
        for dtype in (np.float32, np.float64):
            for shapes in LAYOUTS:
                with self.subTest(dtype=dtype, shapes=shapes):
                    args = inputs(shapes, dtype, seed=1)
                    shape = np.broadcast_shapes(*shapes)
                    rng = np.random.default_rng(2)
                    cts = [np.asarray(rng.uniform(-1, 1, shape), dtype) for _ in range(2)]
                    outs, pull = jax.jit(lambda *a: jax.vjp(ops.branchy, *a))(*args)
                    grads = jax.jit(pull)(tuple(jnp.asarray(c) for c in cts))
                    want = ref.forward("branchy", args, 2)
                    want_g = ref.vjp("branchy", args, cts, [0, 1, 2])
                    for got, exp in zip(list(outs) + list(grads), want + want_g):
                        self.assertEqual(np.asarray(got).dtype, dtype)
                        self.assertEqual(np.shape(got), np.shape(exp))
                        np.testing.assert_array_equal(np.asarray(got), exp)

    def test_branch_taken_per_element(self):
        x = jnp.asarray([-1.0, 2.0])
        y, _ = ops.branchy(x, 3.0, 0.5)
        np.testing.assert_allclose(np.asarray(y), [np.tanh(-1.0) * 3 + 0.5 * np.exp(-1.0), 6.5],
                                   rtol=1e-15)

    def test_vmap(self):
        x, w, b = inputs(((7, 4, 5), (4, 5), (5,)), np.float64, seed=3)
        f = jax.vmap(ops.branchy, in_axes=(0, None, None))
        ys = f(x, w, b)
        for k in range(7):
            for got, exp in zip(ys, ops.branchy(x[k], w, b)):
                np.testing.assert_allclose(np.asarray(got[k]), np.asarray(exp), rtol=1e-15,
                                           atol=0)
        loss = lambda x, w, b: jnp.sum(ops.branchy(x, w, b)[0] ** 2)  # noqa: E731
        g = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=(0, None, None)))(x, w, b)
        self.assertEqual([a.shape for a in g], [(7, 4, 5), (7, 4, 5), (7, 5)])
        for k in range(7):
            gk = jax.grad(loss, argnums=(0, 1, 2))(x[k], w, b)
            for got, exp in zip(g, gk):
                np.testing.assert_allclose(np.asarray(got[k]), np.asarray(exp), rtol=1e-13,
                                           atol=1e-15)

    def test_jvp_is_a_clear_error(self):
        x = jnp.ones((2, 3))
        with self.assertRaisesRegex(TypeError, "forward-mode"):
            jax.jvp(lambda x: ops.branchy(x, x, x)[0], (x,), (x,))

    def test_second_derivatives_are_a_clear_error(self):
        f = lambda x: jnp.sum(ops.branchy(x, 2.0, 1.0)[0])  # noqa: E731
        with self.assertRaisesRegex(NotImplementedError, r"dualcast branchy: second derivatives"):
            jax.grad(lambda x: jnp.sum(jax.grad(f)(x)))(jnp.ones(3))
        with self.assertRaisesRegex(TypeError, r"forward-mode"):  # (jacfwd of jacrev)
            jax.hessian(f)(jnp.ones(3))

    def test_inactive_input_gets_zero(self):
        x, s = jnp.asarray([0.5, -1.5]), jnp.asarray([2.0, 3.0])
        gx, gs = jax.grad(lambda x, s: jnp.sum(ops.scaled(x, s)), argnums=(0, 1))(x, s)
        np.testing.assert_allclose(np.asarray(gx), 2 * np.asarray(s) * np.asarray(x)
                                   + np.cos(np.asarray(x)), rtol=1e-15)
        np.testing.assert_array_equal(np.asarray(gs), [0.0, 0.0])
        check_grads(lambda x: ops.scaled(x, s), [x], order=1, modes=["rev"])

    def test_float32(self):
        x, w, b = (jnp.asarray(a) for a in inputs(((8, 3), (3,), ()), np.float32))
        g = jax.jit(jax.grad(lambda x: jnp.sum(ops.branchy(x, w, b)[0])))(x)
        self.assertEqual(g.dtype, jnp.float32)
        self.assertTrue(np.all(np.isfinite(np.asarray(g))))

    def test_docstring(self):
        self.assertIn("branchy(x, w, b)", ops.branchy.__doc__)


class BadInput(unittest.TestCase):
    def test_wrong_dtype(self):
        with self.assertRaisesRegex(TypeError, r"dualcast branchy: argument w has dtype int32"):
            ops.branchy(jnp.ones(3), jnp.ones(3, jnp.int32), 1.0)

    def test_mixed_float_types(self):
        with self.assertRaisesRegex(TypeError, r"argument w is float32 but x is float64"):
            ops.branchy(jnp.ones(3), jnp.ones(3, jnp.float32), 1.0)

    def test_shapes_do_not_broadcast(self):
        with self.assertRaisesRegex(ValueError, r"dualcast branchy: the argument shapes x \(3,\), "
                                    r"w \(4,\), b \(\) do not broadcast"):
            ops.branchy(jnp.ones(3), jnp.ones(4), 1.0)

    def test_argument_count(self):
        with self.assertRaisesRegex(TypeError, r"dualcast branchy: takes 3 arguments \(x, w, b\), "
                                    r"got 2"):
            ops.branchy(jnp.ones(3), jnp.ones(3))

    def test_device_without_handlers(self):
        class FakeDevice:
            platform = "gpu"

            def __str__(self):
                return "cuda:0"

        class OnGpu:  # an array on a GPU, as far as the check can see
            dtype = np.dtype(np.float32)
            shape = (3,)

            def devices(self):
                return {FakeDevice()}

        with self.assertRaisesRegex(ValueError, r"dualcast branchy: argument w is on cuda:0 but "
                                    r"the library has handlers for cpu only"):
            ops.branchy(jnp.ones(3, jnp.float32), OnGpu(), 1.0)
        ops.branchy(jnp.ones(3), jnp.ones(3), 1.0)  # (CPU arrays pass)

    def test_handler_checks(self):
        # Calls the FFI target directly, past the Python checks: the handler itself refuses.
        tgt = _target("branchy", "fwd")
        res = (jax.ShapeDtypeStruct((3,), jnp.float32),) * 2
        call = jax.ffi.ffi_call(tgt, res)
        with self.assertRaisesRegex(Exception, r"dualcast branchy \(forward\): input 0 has dtype "
                                    r"int32; dualcast kernels take float32 or float64"):
            jax.block_until_ready(call(jnp.ones(3, jnp.int32), jnp.ones(3, jnp.int32),
                                       jnp.ones(3, jnp.int32)))
        with self.assertRaisesRegex(Exception, r"dualcast branchy \(forward\): input 2 has dtype "
                                    r"float64 but input 0 has float32"):
            jax.block_until_ready(call(jnp.ones(3, jnp.float32), jnp.ones(3, jnp.float32),
                                       jnp.ones(3)))
        with self.assertRaisesRegex(Exception, r"dualcast branchy \(forward\): takes 3 array "
                                    r"arguments, got 2"):
            jax.block_until_ready(call(jnp.ones(3, jnp.float32), jnp.ones(3, jnp.float32)))
        with self.assertRaisesRegex(Exception, r"dualcast branchy \(forward\): .*shape"):
            jax.block_until_ready(call(jnp.ones(3, jnp.float32), jnp.ones(4, jnp.float32),
                                       jnp.ones(3, jnp.float32)))
        # A result of the wrong shape: dualcast's own check, nothing written.
        bad = jax.ffi.ffi_call(tgt, (jax.ShapeDtypeStruct((2,), jnp.float32),) * 2)
        with self.assertRaisesRegex(Exception, r"dualcast branchy \(forward\): .*"):
            jax.block_until_ready(bad(*(jnp.ones(3, jnp.float32),) * 3))


def _target(kernel, stage):
    import hashlib

    tag = hashlib.sha1(os.path.abspath(LIB).encode()).hexdigest()[:10]
    return f"dualcast_{kernel}_{stage}_{tag}"


class Loading(unittest.TestCase):
    def test_newer_ffi_api_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            copy = os.path.join(d, "copy.so")
            shutil.copy(LIB, copy)
            real = dj.installed_ffi_api
            built = dj._loaded[os.path.abspath(LIB)].ffi_api
            dj.installed_ffi_api = lambda: (built[0], built[1] - 1)
            try:
                with self.assertRaisesRegex(dj.FfiVersionError,
                                            r"built against XLA FFI API .* Rebuild the library"):
                    dj.load_library(copy)
            finally:
                dj.installed_ffi_api = real

    def test_recorded_version_is_the_installed_one(self):
        self.assertEqual(dj._loaded[os.path.abspath(LIB)].ffi_api, dj.installed_ffi_api())

    def test_not_a_kernel_library(self):
        import ctypes.util

        libm = ctypes.util.find_library("m")
        path = next(p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/libm.so.6",
                                libm or "") if p and os.path.exists(p))
        with self.assertRaisesRegex(ValueError, "has no dualcast_xla_manifest"):
            dj.load_library(path)

    def test_float64_without_x64_is_float32(self):
        # As in every jnp operation: without x64, float64 input computes in float32.
        import subprocess
        import sys

        code = ("import numpy as np, jax, dualcast.jax as dj, sys\n"
                "ops = dj.load_library(sys.argv[1])\n"
                "y = ops.branchy(np.ones(3), np.ones(3, np.float32), 1.0)\n"
                "print(y[0].dtype, y[1].dtype)\n")
        r = subprocess.run([sys.executable, "-c", code, LIB], capture_output=True, text=True,
                           env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=120)
        self.assertEqual(r.stdout.split(), ["float32", "float32"], r.stderr)

    def test_missing_file(self):
        with self.assertRaisesRegex(FileNotFoundError, "no file"):
            dj.load_library("/nonexistent/lib.so")


if __name__ == "__main__":
    unittest.main(verbosity=2)
