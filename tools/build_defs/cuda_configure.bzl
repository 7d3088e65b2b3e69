"""Repository rule for the local CUDA toolkit (/usr/local/cuda, or $CUDA_PATH).

Makes @local_cuda//:nvcc, :toolkit, :cuda_headers, :cudart_static and :nccl when the
toolkit is present. When it is not, the same labels exist but are incompatible with every
configuration except --config=cuda, so a plain or --config=rocm build skips whatever depends
on them (as it skips the HIP targets); under --config=cuda they fail analysis with one
message naming the missing nvcc. `@local_cuda//:defs.bzl` says CUDA_AVAILABLE and CUDA_ROOT.
"""

def _cuda_configure_impl(rctx):
    root = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    available = rctx.path(root + "/bin/nvcc").exists
    rctx.file("defs.bzl", "CUDA_AVAILABLE = %s\nCUDA_ROOT = %r\n" % (available, root))
    if available:
        for d in ["bin", "include", "lib64"]:
            rctx.symlink(root + "/" + d, d)
        rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

filegroup(name = "nvcc", srcs = ["bin/nvcc"])

filegroup(name = "toolkit", srcs = glob(["bin/**", "include/**", "lib64/*.a"]))

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp"]),
    includes = ["include"],
)

cc_library(
    name = "cudart_static",
    srcs = ["lib64/libcudart_static.a"],
    linkopts = ["-ldl", "-lpthread", "-lrt"],
    deps = [":cuda_headers"],
)

# NCCL links against the toolkit's libnccl.so; at run time the loader finds the one the
# target machine provides (the GPU bundle's runner puts it on LD_LIBRARY_PATH).
cc_library(
    name = "nccl",
    srcs = ["lib64/libnccl.so"],
    deps = [":cuda_headers"],
)
""")
    else:
        rctx.file("missing.bzl", _MISSING_BZL % root)
        rctx.file("BUILD.bazel", _MISSING_BUILD)

# Without the toolkit: a rule that fails analysis with one clear message. Its targets are
# compatible only with --config=cuda, so they (and everything that depends on them) are
# skipped in every other configuration; the rule implementation then never runs.
_MISSING_BZL = """
def _missing_toolkit_impl(ctx):
    fail("CUDA toolkit not found: %s/bin/nvcc does not exist. --config=cuda needs the " +
         "CUDA toolkit at /usr/local/cuda (or CUDA_PATH set to its root); without " +
         "--config=cuda the GPU targets are skipped.")

missing_toolkit = rule(implementation = _missing_toolkit_impl)
"""

_MISSING_BUILD = """
load(":missing.bzl", "missing_toolkit")

package(default_visibility = ["//visibility:public"])

[missing_toolkit(
    name = n,
    target_compatible_with = select({
        "@//tools/build_defs:cuda": [],
        "//conditions:default": ["@//tools/build_defs:incompatible"],
    }),
) for n in ["nvcc", "toolkit", "cuda_headers", "cudart_static", "nccl"]]
"""

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
