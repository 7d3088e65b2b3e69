"""Repository rule exposing Debian's abseil (/usr) under the usual @com_google_absl labels.

new_local_repository can hold one BUILD file only, while abseil's labels live in many
packages (//absl/status:statusor, //absl/strings, ...). This rule symlinks the headers and
writes one small BUILD file per package; every label links the same set of shared
libraries (with --as-needed, so a binary records only what it uses).
"""

# package -> target names. Every target is the same headers + libraries; the names exist so
# that BUILD files read like upstream abseil's.
_ABSL_PACKAGES = {
    "absl/algorithm": ["algorithm", "container"],
    "absl/base": ["base", "core_headers", "config"],
    "absl/cleanup": ["cleanup"],
    "absl/container": ["flat_hash_map", "flat_hash_set", "inlined_vector", "btree", "fixed_array"],
    "absl/flags": ["flag", "parse", "usage"],
    "absl/functional": ["function_ref", "any_invocable"],
    "absl/hash": ["hash"],
    "absl/memory": ["memory"],
    "absl/numeric": ["bits", "int128"],
    "absl/random": ["random", "distributions"],
    "absl/status": ["status", "statusor"],
    "absl/strings": ["strings", "str_format", "cord"],
    "absl/synchronization": ["synchronization"],
    "absl/time": ["time"],
    "absl/types": ["span", "optional", "variant"],
    "absl/utility": ["utility"],
}

def _system_absl_impl(rctx):
    rctx.symlink("/usr/include/absl", "include/absl")
    libs = []
    for f in rctx.path("/usr/lib/x86_64-linux-gnu").readdir():
        n = f.basename
        if n.startswith("libabsl_") and n.endswith(".so"):
            libs.append("-l" + n[len("lib"):-len(".so")])
    if not libs:
        fail("abseil not found under /usr/lib/x86_64-linux-gnu: run tools/setup.sh")
    rctx.file("BUILD.bazel", "\n".join([
        "package(default_visibility = ['//visibility:public'])",
        "cc_library(",
        "    name = 'absl_all',",
        "    hdrs = glob(['include/absl/**/*.h', 'include/absl/**/*.inc']),",
        "    includes = ['include'],",
        "    linkopts = ['-Wl,--as-needed'] + %s," % repr(sorted(libs)),
        ")",
        "",
    ]))
    for pkg, names in _ABSL_PACKAGES.items():
        body = ["package(default_visibility = ['//visibility:public'])"]
        for name in names:
            body.append("alias(name = '%s', actual = '//:absl_all')" % name)
        leaf = pkg.split("/")[-1]
        if leaf not in names:
            body.append("alias(name = '%s', actual = '//:absl_all')" % leaf)
        rctx.file(pkg + "/BUILD.bazel", "\n".join(body) + "\n")

system_absl = repository_rule(
    implementation = _system_absl_impl,
    local = True,
)
