"""HIP build rules: one HIP source dialect, compiled by nvcc (--config=cuda) or hipcc
(--config=rocm), skipped in a plain CPU build.

hip_library(name, srcs, hdrs, deps, copts): compiles each .hip source (and .cc sources
that use the HIP runtime) into a static archive and exposes it as a cc target.
hip_test(name, ...): a gtest binary per GPU vendor: `name` (nvidia, tags gpu +
requires-gpu-nvidia) and `name_amd` (tags gpu + requires-gpu-amd); `vendors` narrows that.
`configs` (hip_library, hip_binary) likewise, e.g. ["cuda"] for NCCL code (tag requires-cuda).
hip_binary(name, ...): a cc_binary built from HIP sources (benchmarks, tools), tagged gpu.

On NVIDIA, sources include kernels/platform/hip_runtime.h, which maps the subset of HIP we
use onto CUDA (Debian's HIP 5.2 headers do not compile against CUDA 13).

AMD: /usr/bin/hipcc for gfx90a + gfx940; --define=mlaps_amd_archs=new for gfx942 + gfx950;
--define=mlaps_hipcc=PATH another hipcc with the same flags; --define=mlaps_hip_werror=1 makes
warnings in device code errors. tools/amd_new_archs.sh uses all three (Debian sid's hipcc).
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@local_cuda//:defs.bzl", "CUDA_ROOT")
load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_test")

_CUDA_ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a"]

def _compile_flags(ctx, cc_info):
    cc = cc_info.compilation_context
    flags = []
    for d in cc.defines.to_list():
        flags.append("-D" + d)
    for i in cc.includes.to_list() + cc.quote_includes.to_list():
        flags += ["-I", i]
    for i in cc.system_includes.to_list():
        flags += ["-isystem", i]
    return flags

def _hip_objects_impl(ctx):
    platform = ctx.attr.platform
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    dep_infos = [d[CcInfo] for d in ctx.attr.deps]
    own_context = cc_common.create_compilation_context(
        headers = depset(ctx.files.hdrs),
        includes = depset(["."]),
        quote_includes = depset([".", ctx.genfiles_dir.path, ctx.bin_dir.path]),
    )
    merged = cc_common.merge_cc_infos(
        direct_cc_infos = [CcInfo(compilation_context = own_context)],
        cc_infos = dep_infos,
    )
    inputs = depset(ctx.files.srcs + ctx.files.hdrs, transitive = [merged.compilation_context.headers])

    if platform == "cuda":
        # The toolkit is used in place (nvcc finds cicc, ptxas and its headers beside it).
        compiler = CUDA_ROOT + "/bin/nvcc"
        base = ["-x", "cu", "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-lineinfo"] + _CUDA_ARCH_FLAGS + [
            "-Xcompiler",
            "-fPIC",
            "-DMLAPS_GPU_CUDA=1",
            "-ccbin",
            cc_toolchain.compiler_executable,
        ]
    elif platform == "rocm":
        # --define=mlaps_hipcc=PATH swaps in another hipcc with these same flags (absolute path;
        # tools/amd_new_archs.sh passes tools/sid_hipcc.sh, Debian sid's hipcc in a chroot).
        compiler = ctx.var.get("mlaps_hipcc", "/usr/bin/hipcc")
        base = ["-x", "hip", "-std=c++17", "-O3", "-fPIC", "-DMLAPS_GPU_ROCM=1"] + [
            "--offload-arch=" + a
            for a in ctx.attr.amd_archs
        ]
        if ctx.var.get("mlaps_hip_werror") == "1":
            # Warnings in device code fail the build (tools/amd_new_archs.sh sets this).
            base += ["-Xarch_device", "-Wall", "-Xarch_device", "-Werror"]
    else:
        fail("hip_library %s built without --config=cuda or --config=rocm" % ctx.label)

    extra = _compile_flags(ctx, merged) + ctx.attr.copts
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_hip_objs/%s/%s.o" % (ctx.label.name, src.basename))
        args = base + extra + ["-c", src.path, "-o", obj.path]
        ctx.actions.run(
            executable = compiler,
            arguments = args,
            inputs = inputs,
            outputs = [obj],
            mnemonic = "HipCompile",
            progress_message = "Compiling %s for %s" % (src.short_path, platform),
            env = {"PATH": "/usr/bin:/bin", "HIP_PLATFORM": "amd", "HOME": "/tmp"},
        )
        objects.append(obj)

    archive = ctx.actions.declare_file("lib%s_hip.a" % ctx.label.name)
    ctx.actions.run(
        executable = cc_toolchain.ar_executable,
        arguments = ["rcsD", archive.path] + [o.path for o in objects],
        inputs = objects,
        tools = cc_toolchain.all_files,
        outputs = [archive],
        mnemonic = "HipArchive",
    )
    library = cc_common.create_library_to_link(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        static_library = archive,
        alwayslink = True,
    )
    link_flags = []
    if platform == "rocm":
        link_flags = ["-L/usr/lib/x86_64-linux-gnu", "-lamdhip64"]
    linker_input = cc_common.create_linker_input(
        owner = ctx.label,
        libraries = depset([library]),
        user_link_flags = depset(link_flags),
    )
    own = CcInfo(
        compilation_context = own_context,
        linking_context = cc_common.create_linking_context(linker_inputs = depset([linker_input])),
    )
    return [
        DefaultInfo(files = depset([archive])),
        cc_common.merge_cc_infos(direct_cc_infos = [own], cc_infos = dep_infos),
    ]

_hip_objects = rule(
    implementation = _hip_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".hip", ".cc", ".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh", ".inc"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "platform": attr.string(mandatory = True),
        "amd_archs": attr.string_list(default = ["gfx90a", "gfx940"]),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

_PLATFORM = {
    "//tools/build_defs:cuda": "cuda",
    "//tools/build_defs:rocm": "rocm",
    "//conditions:default": "none",
}

# Which configs a target can be built in.
def _only(*configs):
    d = {"//conditions:default": ["//tools/build_defs:incompatible"]}
    for c in configs:
        d["//tools/build_defs:" + c] = []
    return select(d)

def _gpu_runtime_deps():
    return select({
        "//tools/build_defs:cuda": ["@local_cuda//:cudart_static"],
        "//conditions:default": [],
    })

def _config_tags(configs):
    # Targets that build for NVIDIA only (NCCL, ...) are kept out of the ROCm compile check.
    return ["requires-cuda"] if configs == ["cuda"] else []

def hip_library(name, srcs = [], hdrs = [], deps = [], copts = [], tags = [], visibility = None, configs = ["cuda", "rocm"], **kwargs):
    _hip_objects(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["//kernels/platform:hip_runtime"] + _gpu_runtime_deps(),
        copts = copts,
        platform = select(_PLATFORM),
        amd_archs = select({
            "//tools/build_defs:rocm_new_archs": ["gfx942", "gfx950"],
            "//conditions:default": ["gfx90a", "gfx940"],
        }),
        target_compatible_with = _only(*configs),
        tags = tags + ["gpu"] + _config_tags(configs),
        visibility = visibility,
        **kwargs
    )

def hip_test(name, srcs, hdrs = [], deps = [], copts = [], tags = [], size = "small", data = [], args = [], vendors = ["nvidia", "amd"], **kwargs):
    lib = name + "_objs"
    configs = [{"nvidia": "cuda", "amd": "rocm"}[v] for v in vendors]
    hip_library(
        name = lib,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@com_google_googletest//:gtest"],
        copts = copts,
        testonly = True,
        tags = tags,
        configs = configs,
    )
    for suffix, vendor, config in [("", "nvidia", "cuda"), ("_amd", "amd", "rocm")]:
        if vendor not in vendors:
            continue
        cc_test(
            name = name + suffix,
            deps = [":" + lib, "@com_google_googletest//:gtest_main"],
            tags = tags + ["gpu", "requires-gpu-" + vendor],
            target_compatible_with = _only(config),
            size = size,
            data = data,
            args = args,
            **kwargs
        )

def hip_binary(name, srcs, hdrs = [], deps = [], copts = [], tags = [], configs = ["cuda", "rocm"], **kwargs):
    lib = name + "_objs"
    hip_library(name = lib, srcs = srcs, hdrs = hdrs, deps = deps, copts = copts, tags = tags, configs = configs)
    cc_binary(
        name = name,
        deps = [":" + lib],
        tags = tags + ["gpu"] + _config_tags(configs),
        target_compatible_with = _only(*configs),
        **kwargs
    )
