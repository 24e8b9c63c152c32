"""The cells on a GPU through JAX (label gpu): values and gradients of the CUDA handlers equal
to the CPU handlers' (to rounding: different instruction sets), on XLA's stream. Reports skipped
without a CUDA device visible to JAX or without CUDA handlers in the cells library (built from
python/src/jax_cells.cu when CMake has CUDA)."""
import sys

import jax_support

jax = jax_support.require_jax(cpu_only=False)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import dualcast.jax as dj  # noqa: E402

try:
    gpus = jax.devices("cuda")
except RuntimeError:
    gpus = []
if not gpus:
    print("DUALCAST_SKIPPED: no CUDA device visible to JAX")
    sys.exit(0)
cells = dj._cells()
if "cuda" not in cells.lstm_cell.kernel.platforms:
    print("DUALCAST_SKIPPED: the cells library has no CUDA handlers (built without CUDA)")
    sys.exit(0)

rng = np.random.default_rng(0)
for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
    args = [np.asarray(rng.uniform(-2, 2, (64, 33)), dtype) for _ in range(4)]
    args.append(np.asarray(rng.uniform(-2, 2, (33,)), dtype))
    loss = jax.jit(jax.value_and_grad(lambda *a: jnp.sum(dj.lstm_cell(*a)[0] ** 2),
                                      argnums=(0, 1, 2, 3, 4)))
    cpu = loss(*(jax.device_put(a, jax.devices("cpu")[0]) for a in args))
    gpu = loss(*(jax.device_put(a, gpus[0]) for a in args))
    for c, g in zip(jax.tree.leaves(cpu), jax.tree.leaves(gpu)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(c), rtol=tol, atol=tol)
print("CPU == GPU for the LSTM cell, float32 and float64")
