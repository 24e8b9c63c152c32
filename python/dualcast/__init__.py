"""dualcast's fused differentiable kernels inside PyTorch and JAX programs.

    import dualcast.torch as dct      # the ready cells and load_library for your own kernels
    h, c = dct.lstm_cell(i, f, g, o, c)
    import dualcast.jax as dj         # the same for JAX (XLA FFI handlers under custom_vjp)
    h, c = dj.lstm_cell(i, f, g, o, c)

This package imports neither torch nor jax itself: ``dualcast.torch`` imports torch and
``dualcast.jax`` imports jax, so either works without the other installed.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
