"""dualcast kernels as differentiable JAX operations.

A kernel written once in C++ (a ``dualcast::kernel`` lambda) and given one line,
``DUALCAST_XLA_KERNEL(name, kernel)`` (``dualcast/interop/xla_ffi.hpp``), becomes two XLA FFI
handlers: the forward (one fused pass: the outputs' values) and the VJP (one fused pass: the
inputs' cotangents from the outputs', dual numbers re-evaluated, nothing stored). Build them into a
shared library with CMake's ``dualcast_add_jax_kernels`` and load it here::

    ops = dualcast.jax.load_library("build/my_kernels.so")
    y = ops.my_kernel(x, w)                   # jit, grad, vjp, vmap work
    g = jax.jit(jax.grad(lambda x, w: ops.my_kernel(x, w).sum()))(x, w)

The ready cells (``lstm_cell``, ``gru_cell``, ``hmlstm_update``) come from this package's own
library.

Semantics:

* Arguments: JAX or NumPy arrays of float32 or float64 (one type per call; Python numbers take it;
  float64 is float32 unless JAX's x64 mode is on, as for every jnp operation) with shapes that
  broadcast by NumPy's rules. dualcast broadcasts inside the kernel: nothing is
  materialised, and the cotangent of a broadcast input is summed to its own shape.
* Differentiation is ``jax.custom_vjp``: reverse mode (``grad``, ``vjp``, ``value_and_grad``) runs
  the forward handler, then the VJP handler -- the fused forward + backward of the C++ library.
  Forward mode (``jvp``, ``jacfwd``) is refused by JAX with "can't apply forward-mode autodiff
  (jvp) to a custom_vjp function". Why not ``custom_jvp``: JAX can transpose a JVP rule only when
  it is written in JAX operations, so reverse mode would have to store the kernel's partials
  (10 arrays for the LSTM cell) and multiply them in JAX -- slower than the VJP pass by about the
  memory traffic the fused pass saves, for the reverse mode training uses.
* Second derivatives are not available, never silently wrong: ``grad`` of ``grad`` raises
  NotImplementedError naming the operation; ``hessian`` (forward over reverse) JAX's forward-mode
  error above.
* ``vmap``: the FFI calls use ``vmap_method="expand_dims"``: an unbatched argument gets a leading
  dimension of 1, which dualcast broadcasts -- one call for the whole batch, nothing copied.
* Inputs a kernel does not differentiate (``DUALCAST_XLA_KERNEL(name, k, 2, 3)``: only 2 and 3)
  get a zero cotangent.
* Threads on the CPU: OpenMP's (``OMP_NUM_THREADS``).
* Versions: a library records the XLA FFI API version of the jaxlib it was built against; loading
  it into a jaxlib with an older FFI API (which XLA would refuse with "No FFI handler registered")
  raises an error that says to rebuild.
"""

import ctypes
import functools
import hashlib
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["load_library", "Library", "lstm_cell", "gru_cell", "hmlstm_update",
           "installed_ffi_api", "FfiVersionError"]

_VMAP_METHOD = "expand_dims"
_MAX_RANK = 8
_PLATFORMS = {"cpu": "cpu", "cuda": "CUDA"}


class FfiVersionError(RuntimeError):
    """A kernel library built against an XLA FFI API the installed jaxlib does not provide."""


def installed_ffi_api():
    """The XLA FFI API version (major, minor) of the installed jaxlib, read from the header it
    ships (``jax.ffi.include_dir()``); None when the header is missing."""
    path = os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    major = re.search(r"#define XLA_FFI_API_MAJOR (\d+)", text)
    minor = re.search(r"#define XLA_FFI_API_MINOR (\d+)", text)
    if not major or not minor:
        return None
    return int(major.group(1)), int(minor.group(1))


def _check_ffi_api(path, built):
    have = installed_ffi_api()
    if have is None:
        return  # (no header to compare with: XLA's own check remains)
    import jaxlib

    if built[0] != have[0] or built[1] > have[1]:
        raise FfiVersionError(
            f"dualcast.jax: {path} was built against XLA FFI API {built[0]}.{built[1]}, but the "
            f"installed jaxlib {jaxlib.__version__} provides {have[0]}.{have[1]}; XLA would reject "
            f"its handlers ('No FFI handler registered'). Rebuild the library against this jaxlib "
            f"(dualcast_add_jax_kernels reads jax.ffi.include_dir() of the Python it runs), or "
            f"install a jaxlib with FFI API {built[0]}.{built[1]} or newer.")


class _Kernel:
    def __init__(self, name, n_in, n_out, active):
        self.name, self.n_in, self.n_out, self.active = name, n_in, n_out, active
        self.platforms = []


def _read_manifest(lib, path):
    try:
        fn = lib.dualcast_xla_manifest
    except AttributeError:
        raise ValueError(f"dualcast.jax.load_library: {path} has no dualcast_xla_manifest: build "
                         "it from sources using DUALCAST_XLA_KERNEL (dualcast/interop/xla_ffi.hpp) "
                         "with dualcast_add_jax_kernels") from None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
    n = fn(None, 0)
    buf = ctypes.create_string_buffer(n)
    fn(buf, n)
    lines = buf.value.decode().splitlines()
    if not lines or lines[0] != "dualcast-xla 1":
        raise ValueError(f"dualcast.jax.load_library: {path}: unknown manifest format")
    api, kernels = None, {}
    for line in lines[1:]:
        f = line.split()
        if f[0] == "ffi-api":
            api = tuple(int(x) for x in f[1].split("."))
        elif f[0] == "kernel":
            name, platform, n_in, n_out, act = f[1], f[2], int(f[3]), int(f[4]), f[5]
            active = [] if act == "-" else [int(x) for x in act.split(",")]
            k = kernels.setdefault(name, _Kernel(name, n_in, n_out, active))
            k.platforms.append(platform)
    return api, kernels


class Library:
    """The operations of one kernel library, as attributes (``lib.my_kernel(...)``) and in
    ``lib.ops`` (a dict). ``lib.ffi_api``: the XLA FFI API version it was built against."""

    def __init__(self, path, ffi_api, ops):
        self.path, self.ffi_api, self.ops = path, ffi_api, ops
        for name, op in ops.items():
            setattr(self, name, op)

    def __repr__(self):
        return f"<dualcast.jax.Library {self.path}: {', '.join(self.ops)}>"


_loaded = {}  # absolute path -> Library (a library is registered with XLA once)


def load_library(path, arg_names=None, docs=None):
    """Load a kernel library built with ``dualcast_add_jax_kernels``, register its XLA FFI
    handlers with JAX and return a :class:`Library` of differentiable operations.

    arg_names: optional {kernel name: [argument names]} for signatures and error messages.
    docs: optional {kernel name: docstring}.
    Raises FfiVersionError when the library needs a newer XLA FFI API than the installed jaxlib's.
    """
    path = os.path.abspath(os.fspath(path))
    if path in _loaded:
        return _loaded[path]
    if not os.path.exists(path):
        raise FileNotFoundError(f"dualcast.jax.load_library: no file {path}")
    lib = ctypes.CDLL(path)
    api, kernels = _read_manifest(lib, path)
    if api is None:
        raise ValueError(f"dualcast.jax.load_library: {path}: the manifest has no FFI API version")
    _check_ffi_api(path, api)
    tag = hashlib.sha1(path.encode()).hexdigest()[:10]
    ops = {}
    for k in kernels.values():
        targets = {}
        for stage in ("fwd", "vjp"):
            target = f"dualcast_{k.name}_{stage}_{tag}"
            for platform in k.platforms:
                symbol = getattr(lib, f"dualcast_xla_{k.name}_{stage}_{platform}")
                jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(symbol),
                                            platform=_PLATFORMS[platform])
            targets[stage] = target
        names = (arg_names or {}).get(k.name) or [f"x{i}" for i in range(k.n_in)]
        if len(names) != k.n_in:
            raise ValueError(f"dualcast.jax.load_library: {len(names)} argument names for "
                             f"{k.name}, which takes {k.n_in}")
        ops[k.name] = _make_op(k, targets, names, (docs or {}).get(k.name))
    result = Library(path, api, ops)
    result._cdll = lib  # keeps the handlers' code loaded
    _loaded[path] = result
    return result


def _dtype_of(name, args, names):
    """The call's float type: that of its array arguments (all the same), else JAX's default."""
    dtype = None
    for a, n in zip(args, names):
        if isinstance(a, (bool, int, float)):
            continue
        d = np.dtype(a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype)
        if d == np.float64:  # float32 without x64, as every jnp operation takes it
            d = np.dtype(jax.dtypes.canonicalize_dtype(d))
        if d not in (np.float32, np.float64):
            raise TypeError(f"dualcast {name}: argument {n} has dtype {d}; dualcast kernels take "
                            f"float32 or float64 (cast it with .astype)")
        if dtype is None:
            dtype, first = d, n
        elif d != dtype:
            raise TypeError(f"dualcast {name}: argument {n} is {d} but {first} is {dtype} (one "
                            f"float type per call; cast one of them)")
    if dtype is None:
        dtype = np.dtype(jnp.zeros(()).dtype)
    return dtype


def _check_devices(k, args, names):
    """A concrete array on a platform the library has no handlers for: a clear error now, not
    XLA's "No FFI handler registered" at compile time. (Traced arguments under jit have no device
    yet; XLA's message remains for them.)"""
    for a, n in zip(args, names):
        devices = getattr(a, "devices", None)
        if not callable(devices) or isinstance(a, jax.core.Tracer):
            continue
        for d in devices():
            platform = "cuda" if d.platform in ("gpu", "cuda") else d.platform
            if platform not in k.platforms:
                raise ValueError(
                    f"dualcast {k.name}: argument {n} is on {d} but the library has handlers for "
                    f"{', '.join(k.platforms)} only (CUDA handlers come from the same "
                    f"DUALCAST_XLA_KERNEL line in a .cu file compiled by nvcc)")


def _make_op(k, targets, names, doc):
    active = set(k.active)

    def fwd_call(xs, shape, dtype):
        res = tuple(jax.ShapeDtypeStruct(shape, dtype) for _ in range(k.n_out))
        return jax.ffi.ffi_call(targets["fwd"], res, vmap_method=_VMAP_METHOD)(*xs)

    @jax.custom_jvp
    def vjp_call(xs, cts):
        res = tuple(jax.ShapeDtypeStruct(xs[i].shape, xs[i].dtype) for i in k.active)
        if not res:
            return ()
        return jax.ffi.ffi_call(targets["vjp"], res, vmap_method=_VMAP_METHOD)(*xs, *cts)

    @vjp_call.defjvp
    def vjp_call_jvp(primals, tangents):
        # Differentiating the VJP (grad of grad, jacfwd of grad, hessian) would need the kernel's
        # second derivatives, which this operation does not provide: say so instead of JAX's
        # generic "cannot be differentiated".
        raise NotImplementedError(
            f"dualcast {k.name}: second derivatives (grad of grad, hessian) are not supported: the "
            f"operation's VJP is one fused pass without a derivative of its own")

    @jax.custom_vjp
    def core(*xs):
        shape = jnp.broadcast_shapes(*(x.shape for x in xs))
        return fwd_call(xs, shape, xs[0].dtype)

    def core_fwd(*xs):
        return core(*xs), xs

    def core_bwd(xs, cts):
        xbar = iter(vjp_call(xs, cts))
        return tuple(next(xbar) if i in active else None for i in range(k.n_in))

    core.defvjp(core_fwd, core_bwd)

    def op(*args):
        if len(args) != k.n_in:
            raise TypeError(f"dualcast {k.name}: takes {k.n_in} arguments ({', '.join(names)}), "
                            f"got {len(args)}")
        dtype = _dtype_of(k.name, args, names)
        _check_devices(k, args, names)
        xs = [jnp.asarray(a, dtype=dtype) for a in args]
        try:
            shape = jnp.broadcast_shapes(*(x.shape for x in xs))
        except ValueError:
            raise ValueError(f"dualcast {k.name}: the argument shapes "
                             + ", ".join(f"{n} {tuple(x.shape)}" for n, x in zip(names, xs))
                             + " do not broadcast (NumPy's rules)") from None
        if len(shape) > _MAX_RANK:
            raise ValueError(f"dualcast {k.name}: rank {len(shape)} exceeds dualcast's {_MAX_RANK}")
        # Every argument at the call's rank (a free reshape): under vmap, the batch dimension is
        # then the leading one of each, so dualcast's broadcasting lines the batches up.
        xs = [x if x.ndim == len(shape) else x.reshape((1,) * (len(shape) - x.ndim) + x.shape)
              for x in xs]
        out = core(*xs)
        return out[0] if k.n_out == 1 else tuple(out)

    op.__name__ = op.__qualname__ = k.name
    op.__doc__ = doc or (
        f"{k.name}({', '.join(names)}) -> {k.n_out} output{'s' if k.n_out > 1 else ''}: a dualcast "
        f"kernel as a JAX operation (forward and VJP as XLA FFI calls; jit, grad, vjp, vmap). "
        f"Differentiated arguments: {', '.join(names[i] for i in k.active) or 'none'}.")
    op.kernel = k
    return op


# ---- the ready cells -------------------------------------------------------------------------

_CELLS_ARGS = {
    "lstm_cell": ["i", "f", "g", "o", "c"],
    "gru_cell": ["x_r", "x_z", "x_n", "h_r", "h_z", "h_n", "h"],
    "hmlstm_update": ["z", "zb", "c", "f", "i", "g"],
}


def _cells_library_path():
    env = os.environ.get("DUALCAST_JAX_CELLS")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("dualcast_jax_cells.so", "_dualcast_jax_cells.so"):
        p = os.path.join(here, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(
        "dualcast.jax: the cells library (dualcast_jax_cells.so) is not installed next to "
        f"{here}: install the package (pip install ./python) or set DUALCAST_JAX_CELLS to the "
        "library a CMake build made (target dualcast_jax_cells)")


@functools.lru_cache(maxsize=None)
def _cells():
    return load_library(_cells_library_path(), arg_names=_CELLS_ARGS)


def lstm_cell(i, f, g, o, c):
    """The LSTM cell update as ONE fused dualcast kernel (forward and VJP each one pass).

    i, f, g, o: the gate pre-activations (before their sigmoid / tanh), c: the previous cell
    state; arrays broadcasting to one shape (B x H typically), float32 or float64::

        c2 = sigmoid(f) * c + sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c2)

    Returns (h, c2). Every argument is differentiated (reverse mode; see the module's docstring).
    """
    return _cells().lstm_cell(i, f, g, o, c)


def gru_cell(x_r, x_z, x_n, h_r, h_z, h_n, h):
    """The GRU cell update (PyTorch's formulation) as ONE fused dualcast kernel.

    x_*: the input projections, h_*: the hidden projections (biases included), h: the previous
    hidden state::

        r = sigmoid(x_r + h_r); z = sigmoid(x_z + h_z); n = tanh(x_n + r * h_n)
        h' = (1 - z) * n + z * h

    Returns h'. Every argument is differentiated.
    """
    return _cells().gru_cell(x_r, x_z, x_n, h_r, h_z, h_n, h)


def hmlstm_update(z, zb, c, f, i, g):
    """The HM-LSTM cell-state update (Chung et al. 2017) as ONE fused dualcast kernel, with a
    real branch per element.

    z: this layer's boundary mask (previous step), zb: the layer below's (this step), 0 or 1, in
    any layout broadcasting to c's shape (B x H, B x 1, 1 x H, a scalar); cast to c's float type.
    They are not differentiated (their cotangent is zero) -- their values pick the branch::

        z == 1:             c' = sigmoid(i) * tanh(g)                    (FLUSH)
        z == 0 and zb == 0: c' = c                                      (COPY)
        otherwise:          c' = sigmoid(f) * c + sigmoid(i) * tanh(g)  (UPDATE)

    Returns c'. c, f, i, g are differentiated.
    """
    dtype = _dtype_of("hmlstm_update", (c, f, i, g), ["c", "f", "i", "g"])
    z, zb = (jax.lax.stop_gradient(jnp.asarray(m).astype(dtype)) for m in (z, zb))
    return _cells().hmlstm_update(z, zb, c, f, i, g)
