"""A user's dualcast kernel inside a JAX program, under jit(grad(...)).

The kernel (examples/python/jax_user_kernel.cpp) is one C++ lambda with a branch per element;
DUALCAST_XLA_KERNEL(gated, gated) makes its forward and VJP XLA FFI handlers, and
dualcast.jax.load_library makes them a differentiable JAX operation. Here it sits between two
jnp matmuls in a small regression model trained by gradient descent.

    python examples/python/jax_user_kernel.py LIBRARY [--steps N]
(LIBRARY: the dualcast_jax_example target's file; the test python_jax_example runs this.)
"""
import argparse

import jax
import jax.numpy as jnp

import dualcast.jax as dj

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("library")
ap.add_argument("--steps", type=int, default=200)
args = ap.parse_args()

ops = dj.load_library(args.library, arg_names={"gated": ["x", "u", "w"]})

# --- the 10-line snippet of the guide ---
k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
X = jax.random.normal(k1, (256, 16))                    # inputs
Y = jnp.sin(X @ jax.random.normal(k2, (16, 1)))         # targets
params = {"a": 0.3 * jax.random.normal(k3, (16, 32)), "g": jnp.zeros(32),
          "w": jnp.ones(32), "b": 0.3 * jax.random.normal(k4, (32, 1))}

def loss(p, X, Y):
    h = X @ p["a"]
    h = ops.gated(h, p["g"] + h, p["w"])                # the dualcast operation, broadcast w
    return jnp.mean((h @ p["b"] - Y) ** 2)

step = jax.jit(lambda p: jax.tree.map(lambda v, d: v - 0.05 * d, p, jax.grad(loss)(p, X, Y)))
# --- end of the snippet ---

first = float(loss(params, X, Y))
for _ in range(args.steps):
    params = step(params)
last = float(loss(params, X, Y))
print(f"loss {first:.4f} -> {last:.4f} after {args.steps} steps")
if not last < 0.5 * first:
    raise SystemExit("the loss did not halve")
