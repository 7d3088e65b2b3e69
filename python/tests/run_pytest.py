"""Bazel py_test entry point: runs pytest on the test file given as the first argument.

Under `bazel test --config=asan` the C ABI library is built with AddressSanitizer, whose
runtime must be loaded before anything else: the runner then re-executes itself with
LD_PRELOAD=libasan (leak checking off: CPython's own allocations are not ours)."""
import glob
import os
import sys


def _needs_asan():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = os.path.join(here, "libmlaps_c.so")
    try:
        with open(lib, "rb") as f:
            return b"libasan.so" in f.read()
    except OSError:
        return False


if __name__ == "__main__":
    if _needs_asan() and "libasan" not in os.environ.get("LD_PRELOAD", ""):
        runtimes = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libasan.so.*"))
        if runtimes:
            env = dict(os.environ)
            env["LD_PRELOAD"] = runtimes[-1]
            env["ASAN_OPTIONS"] = "detect_leaks=0:" + env.get("ASAN_OPTIONS", "")
            os.execve(sys.executable, [sys.executable] + sys.argv, env)
    import pytest
    sys.exit(pytest.main([sys.argv[1], "-q", "-p", "no:cacheprovider"] + sys.argv[2:]))
