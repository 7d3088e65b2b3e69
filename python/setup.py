"""Wheel of the mlaps Python package, built offline with Debian's setuptools + wheel:

    python/build_wheel.sh            # bazel build, stage, then this setup.py bdist_wheel

Run from a staged tree (build_wheel.sh makes it): mlaps/*.py plus mlaps/_lib/ holding
libmlaps_c.so (and libmlaps_cuda.so when built with --config=cuda) and the shared libraries
they need that a plain Linux lacks (Debian's abseil, protobuf). The wheel is tagged
py3-none-<platform>: the native code is a C ABI library loaded with ctypes, not a CPython
extension, so one wheel installs under any Python 3 (3.11 here, 3.12 on the GPU machine)."""
import os
import re

from setuptools import setup
from setuptools.dist import Distribution

try:
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # pragma: no cover
    _bdist_wheel = None

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "mlaps", "__init__.py")) as f:
    version = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # platform wheel: it carries .so files
        return True


cmdclass = {}
if _bdist_wheel is not None:
    class bdist_wheel(_bdist_wheel):
        def finalize_options(self):
            _bdist_wheel.finalize_options(self)
            self.root_is_pure = False

        def get_tag(self):
            _, _, plat = _bdist_wheel.get_tag(self)
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = bdist_wheel

setup(
    name="mlaps",
    version=version,
    description="MLA decode with persistent scheduling: AITER-shaped planner, plan checker, "
                "CPU simulator, GPU decode (ctypes over a C ABI library)",
    packages=["mlaps"],
    package_data={"mlaps": ["_lib/*.so", "_lib/*.so.*", "gpu/*.py"]},
    include_package_data=True,
    python_requires=">=3.8",
    install_requires=["numpy"],
    distclass=BinaryDistribution,
    cmdclass=cmdclass,
    zip_safe=False,
)
