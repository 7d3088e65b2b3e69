#!/usr/bin/env python3
"""Resource report of AMD device code: one row per kernel and arch.

Usage: amd_resources.py ROOT OBJECT... (run by tools/amd_new_archs.sh)

Reads the device code objects inside each HIP host object (the offload bundle in its
.hip_fatbin section) with the LLVM tools of the sid root ROOT, and prints what the code
object's metadata (llvm-readelf --notes) records per kernel: VGPRs (arch + AGPRs, the
unified file of gfx90a and later), AGPRs, SGPRs, LDS (group segment) bytes, scratch (private
segment) bytes per lane, spills, and the occupancy that follows, in waves per SIMD.

Occupancy (CDNA2/3/3.5, wave64; what LLVM's AMDGPU subtarget computes):
  VGPRs: 512 per lane per SIMD, allocated in blocks of 8 -> 512 / alignup(vgpr, 8)
  SGPRs: gfx9 table: <= 80 -> 10, <= 88 -> 9, <= 100 -> 8, else 7
  LDS:   per-CU LDS (64 KiB on gfx90a/gfx942, 160 KiB on gfx950) / LDS per work-group
         work-groups, each of ceil(max_flat_workgroup_size / 64) waves, over 4 SIMDs
  capped at 8 waves per SIMD. The work-group size is the kernel's __launch_bounds__ (1024
  when it has none, so LDS-limited rows of such kernels are a lower bound). LDS is the static
  part only: dynamic shared memory is set at launch and is not in the code object.
Checked against clang's -Rpass-analysis=kernel-resource-usage for the library kernels.

Scratch: the private segment the dispatch reserves per lane, and how many scratch
instructions the code has (llvm-objdump), also in non-inlined functions it calls.
"""

import os
import re
import struct
import subprocess
import sys
import tempfile

LDS_PER_CU = {"gfx90a": 65536, "gfx940": 65536, "gfx942": 65536, "gfx950": 163840}
MAX_WAVES_PER_SIMD = 8


def run(root, *cmd):
    return subprocess.run(["/usr/sbin/chroot", root] + list(cmd), check=True, capture_output=True,
                          text=True).stdout


def kernels_of(notes):
    """Kernel-level keys of each kernel in a code object's AMDGPU metadata (readelf --notes)."""
    kernels, cur, indent = [], None, None
    in_kernels = False
    for line in notes.splitlines():
        if re.match(r"^\s*amdhsa\.kernels:", line):
            in_kernels = True
            continue
        if not in_kernels:
            continue
        m = re.match(r"^(\s*)- (\.[\w.]+):\s*(.*)$", line)
        if m and (indent is None or len(m.group(1)) == indent):
            indent = len(m.group(1))  # a new kernel entry
            cur = {}
            kernels.append(cur)
            cur[m.group(2)] = m.group(3).strip()
            continue
        m = re.match(r"^(\s*)(\.[\w.]+):\s*(.*)$", line)
        if m and cur is not None and len(m.group(1)) == indent + 2:
            cur[m.group(2)] = m.group(3).strip()
        elif re.match(r"^\s*amdhsa\.\w+:", line):
            in_kernels = False
    return kernels


def short_name(demangled):
    """The kernel's qualified name with template arguments, without return type and parameters."""
    name = demangled[len("void "):] if demangled.startswith("void ") else demangled
    if name.endswith(")"):  # drop the parameter list: the parenthesis matching the last one
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name.replace("(anonymous namespace)::", "").replace("mlaps::", "")


def scratch_ops(root, code_object):
    """Per kernel symbol: how many instructions of its code access scratch memory."""
    ops, name = {}, None
    for line in run(root, "/usr/bin/llvm-objdump-21", "-d", code_object).splitlines():
        m = re.match(r"^[0-9a-f]+ <(\w+)>:$", line)
        if m:
            name = m.group(1)
            ops.setdefault(name, 0)
        elif name and re.match(r"^\s+(scratch|buffer)_(load|store)", line):
            ops[name] += 1
    return ops


def occupancy(arch, k):
    vgpr = max(1, int(k.get(".vgpr_count", 0)))
    sgpr = int(k.get(".sgpr_count", 0))
    lds = int(k.get(".group_segment_fixed_size", 0))
    wg = int(k.get(".max_flat_workgroup_size", 1024))
    w_vgpr = 512 // ((vgpr + 7) // 8 * 8)
    w_sgpr = 10 if sgpr <= 80 else 9 if sgpr <= 88 else 8 if sgpr <= 100 else 7
    w_lds = MAX_WAVES_PER_SIMD
    if lds:
        groups = LDS_PER_CU.get(arch, 65536) // lds
        w_lds = groups * ((wg + 63) // 64) // 4
    waves = min(MAX_WAVES_PER_SIMD, w_vgpr, w_sgpr, w_lds)
    limit = [n for n, w in (("vgpr", w_vgpr), ("sgpr", w_sgpr), ("lds", w_lds)) if w == waves]
    return waves, limit if waves < MAX_WAVES_PER_SIMD else []


def elf_section(path, wanted):
    """The bytes of one section of an ELF64 little-endian file, or None."""
    with open(path, "rb") as f:
        data = f.read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i):  # name offset, file offset, size
        h = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        return h[0], h[4], h[5]
    _, str_off, _ = header(shstrndx)
    for i in range(shnum):
        name_off, off, size = header(i)
        end = data.index(b"\0", str_off + name_off)
        if data[str_off + name_off:end].decode() == wanted:
            return data[off:off + size]
    return None


def unbundle(fatbin):
    """(target triple, code object bytes) of each entry of a clang offload bundle."""
    magic = b"__CLANG_OFFLOAD_BUNDLE__"
    if not fatbin.startswith(magic):
        raise ValueError("not an uncompressed clang offload bundle (compressed: %s)" %
                         fatbin.startswith(b"CCOB"))
    n, = struct.unpack_from("<Q", fatbin, len(magic))
    pos, entries = len(magic) + 8, []
    for _ in range(n):
        off, size, tlen = struct.unpack_from("<QQQ", fatbin, pos)
        triple = fatbin[pos + 24:pos + 24 + tlen].decode()
        pos += 24 + tlen
        entries.append((triple, fatbin[off:off + size]))
    return entries


def main():
    root, objects = sys.argv[1], sys.argv[2:]
    rows = {}
    with tempfile.TemporaryDirectory(dir=os.path.join(root, "tmp")) as tmp:
        inner = tmp[len(root):]
        code_objects = []  # (host object, arch, path inside the root)
        for obj in objects:
            fatbin = elf_section(obj, ".hip_fatbin")
            if fatbin is None:
                continue  # host code only (launches kernels defined elsewhere)
            for triple, blob in unbundle(fatbin):
                arch = triple.rsplit("-", 1)[-1].split(":")[0]
                if not arch.startswith("gfx"):
                    continue
                name = "%d.%s.co" % (len(code_objects), arch)
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(blob)
                code_objects.append((obj, arch, os.path.join(inner, name)))
        # One llvm-readelf for all (each LLVM tool start costs ~0.3 s).
        notes = run(root, "/usr/bin/llvm-readelf-21", "--notes", *[c for _, _, c in code_objects])
        per_file = dict(re.findall(r"^File: (\S+)\n(.*?)(?=^File: |\Z)", notes, re.S | re.M))
        for obj, arch, co in code_objects:
            kernels = kernels_of(per_file.get(co, ""))
            # Disassembled only where some kernel has scratch (the slow part).
            ops = {}
            if any(int(k.get(".private_segment_fixed_size", 0)) for k in kernels):
                ops = scratch_ops(root, co)
            names_here = {k[".name"] for k in kernels}
            # Non-kernel functions (calls the inliner left) with scratch accesses.
            callees = {f: n for f, n in ops.items() if n and f not in names_here}
            for k in kernels:
                k["scratch_ops"] = ops.get(k[".name"], 0)
                k["callee_ops"] = callees
                rows[(k[".name"], arch)] = (obj, k)
        names = sorted({n for n, _ in rows} |
                       {f for _, k in rows.values() for f in k["callee_ops"]})
        demangled = dict(zip(names, run(root, "/usr/bin/llvm-cxxfilt-21", *names).splitlines()))

    archs = sorted({a for _, a in rows})
    print("%-44s %-7s %4s %4s %4s %6s %7s %7s %5s  %-18s %s" % (
        "kernel", "arch", "VGPR", "AGPR", "SGPR", "LDS", "scratch", "scr-ops", "waves", "limit",
        "source"))
    hot_scratch = []
    for n in sorted(names, key=lambda n: demangled[n]):
        for arch in archs:
            if (n, arch) not in rows:
                continue
            obj, k = rows[(n, arch)]
            waves, limit = occupancy(arch, k)
            scratch = int(k.get(".private_segment_fixed_size", 0))
            vspill = int(k.get(".vgpr_spill_count", 0))
            sspill = int(k.get(".sgpr_spill_count", 0))
            dem = short_name(demangled[n])
            note = ",".join(limit)
            if sspill:  # SGPR spills go to VGPR lanes (v_writelane), not to memory
                note += " sgpr-spills=%d" % sspill
            if vspill:
                note += " VGPR-SPILLS=%d" % vspill
            if k.get(".uses_dynamic_stack") == "true":
                note += " dynamic-stack"
            print("%-44s %-7s %4s %4s %4s %6s %7d %7d %5d  %-18s %s" % (
                dem[:44], arch, k.get(".vgpr_count"), k.get(".agpr_count", "0"),
                k.get(".sgpr_count"), k.get(".group_segment_fixed_size"), scratch,
                k["scratch_ops"], waves, note.strip(), os.path.basename(obj)[:-len(".o")]))
            if scratch and "/_hip_objs/" in obj and "/tests/" not in obj and "bench" not in obj:
                callees = ", ".join("%s %d" % (short_name(demangled[f]), n)
                                    for f, n in sorted(k["callee_ops"].items()))
                hot_scratch.append("%s (%s): %d bytes per lane, %d scratch instructions%s%s" % (
                    dem, arch, scratch, k["scratch_ops"],
                    "; in called functions: " + callees if callees else "",
                    " (reserved, never accessed)" if not k["scratch_ops"] and not callees else ""))
    for h in hot_scratch:
        print("scratch > 0 in a library kernel: " + h)
    return 0


if __name__ == "__main__":
    sys.exit(main())
