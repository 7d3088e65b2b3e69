"""Argument handling shared by the planner, checker and decode layers: dtype names, arch
names, host (numpy) and device (__cuda_array_interface__ / DLPack) arrays."""

import ctypes
import os
import sys

import numpy as np

ARCHS = {"gfx942": 0, "gfx950": 1, "sm90": 2}
ARCH_NAMES = {v: k for k, v in ARCHS.items()}
BF16, FP8 = 0, 1
DTYPE_NAMES = {BF16: "bf16", FP8: "fp8"}


def arch_code(arch):
    """'sm90' | 'gfx950' | 'gfx942' (None: $MLAPS_ARCH, else 'sm90')."""
    if arch is None:
        arch = os.environ.get("MLAPS_ARCH", "sm90")
    if not isinstance(arch, str):
        raise TypeError("arch=%r: must be a string, one of %s" % (arch, ", ".join(ARCHS)))
    key = arch.strip().lower()
    if key not in ARCHS:
        raise ValueError("arch=%r: must be one of %s" % (arch, ", ".join(ARCHS)))
    return ARCHS[key]


def dtype_code(name, value):
    """A q / kv dtype: torch.bfloat16 / torch.float8_e4m3fn(uz), the strings 'bf16' /
    'bfloat16' / 'fp8' / 'float8_e4m3fn' / 'float8_e4m3fnuz', or a numpy dtype of those
    names (ml_dtypes). None is refused: a plan made for the wrong dtype picks the wrong kernel
    variant (AITER planned bf16 when the dtype was left out, and fp8 output was garbage)."""
    if value is None:
        raise TypeError("%s is required (None): mlaps picks the kernel variant by the q/kv dtype,"
                        " and a plan made for another dtype is wrong for this one" % name)
    text = str(value).lower()
    for prefix in ("torch.", "dtype(", "<class '"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.strip("')>\"")
    if text in ("bf16", "bfloat16"):
        return BF16
    if text in ("fp8", "float8_e4m3fn", "float8_e4m3fnuz", "e4m3fn", "e4m3fnuz"):
        return FP8
    raise TypeError("%s=%r: mlaps runs bf16 or fp8 (e4m3fn / e4m3fnuz) only" % (name, value))


def torch_like(*dtypes):
    """The torch module when one of `dtypes` is a torch dtype (without importing torch)."""
    for d in dtypes:
        if type(d).__module__ == "torch":
            return sys.modules.get("torch")
    return None


def is_device_array(x):
    if hasattr(x, "__cuda_array_interface__"):
        return True
    dev = getattr(x, "device", None)
    return dev is not None and getattr(dev, "type", None) in ("cuda", "hip")


def host_array(name, x, dtype, ndim=None, writable=False, shape=None):
    """A numpy view of host array `x` (numpy array or torch CPU tensor), checked: dtype,
    number of dimensions, C-contiguity, writability. Never copies an output."""
    if x is None:
        raise TypeError("%s is None: an array is required" % name)
    if isinstance(x, np.ndarray):
        a = x
    elif hasattr(x, "numpy") and getattr(getattr(x, "device", None), "type", "cpu") == "cpu":
        a = x.numpy()  # torch CPU tensor: shares memory
    elif hasattr(x, "__array_interface__"):
        a = np.asarray(x)  # a view of the object's memory
    else:
        raise TypeError("%s: expected a numpy array or tensor, got %s" % (name, type(x).__name__))
    if isinstance(dtype, (tuple, list)):
        if a.dtype not in dtype:
            raise TypeError("%s has dtype %s, must be %s"
                            % (name, a.dtype, " or ".join(str(np.dtype(d)) for d in dtype)))
    elif a.dtype != dtype:
        raise TypeError("%s has dtype %s, must be %s" % (name, a.dtype, np.dtype(dtype)))
    if ndim is not None and a.ndim != ndim:
        raise ValueError("%s has %d dimension(s) (shape %s), must have %d"
                         % (name, a.ndim, tuple(a.shape), ndim))
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise ValueError("%s has shape %s, must be %s" % (name, tuple(a.shape), tuple(shape)))
    if not a.flags.c_contiguous:
        raise ValueError("%s is not contiguous (strides %s)" % (name, a.strides))
    if writable and not a.flags.writeable:
        raise ValueError("%s is read-only; it is an output written in place" % name)
    return a


def addr(a):
    """The address of a C-contiguous numpy array's data (None when empty)."""
    return a.ctypes.data if a is not None and a.size else None


i32p = f32p = f64p = addr


def int_arg(name, value, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError("%s=%r: must be an int" % (name, value))
    value = int(value)
    if lo is not None and value < lo:
        raise ValueError("%s=%d: must be >= %d" % (name, value, lo))
    if hi is not None and value > hi:
        raise ValueError("%s=%d: must be <= %d" % (name, value, hi))
    return value
