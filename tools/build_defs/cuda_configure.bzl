"""Repository rule for the local CUDA toolkit (/usr/local/cuda).

Makes @local_cuda//:nvcc, :cuda_headers, :cudart_static and :nccl when the toolkit is
present; when it is not, the same labels exist but fail with a clear message if built, and
`@local_cuda//:defs.bzl` says CUDA_AVAILABLE = False.
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
        rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

genrule(
    name = "missing",
    outs = ["missing.txt"],
    cmd = "echo 'CUDA toolkit not found at %s: GPU targets need --config=cuda on a machine with nvcc' >&2; exit 1",
)

[filegroup(name = n, srcs = [":missing"]) for n in ["nvcc", "toolkit"]]

[cc_library(name = n, srcs = [":missing"]) for n in ["cuda_headers", "cudart_static", "nccl"]]
""" % root)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
