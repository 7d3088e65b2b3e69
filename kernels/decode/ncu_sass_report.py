#!/usr/bin/env python3
"""Summarizes ncu's source-level (SASS) page of one kernel: where its warps wait and what runs.

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass` (gzip allowed), from a
report taken with `--section SourceCounters --section WarpStateStats` (ncu 2025). Prints the
totals, the stall reasons, the opcodes by instructions executed and by warp samples, the most
sampled instructions (offset from the kernel's first instruction, share of samples, executions,
top two stall reasons), and per --region NAME=START-END (hex byte offsets, END excluded) its share
of samples and of instructions. Session 31 read the bf16 f16pv kernel this way (notes.md).

  python3 kernels/decode/ncu_sass_report.py sass.csv.gz [--top N] [--region S=0x6000-0x8000 ...]
"""
import argparse
import collections
import csv
import gzip
import sys


class Instruction:
    """One SASS instruction's row: offset, text, warp samples, executions, samples by reason."""

    def __init__(self, offset, text, samples, executed, reasons):
        self.offset = offset
        self.text = text
        self.samples = samples
        self.executed = executed
        self.reasons = reasons

    @property
    def opcode(self):
        """The mnemonic without predicate and modifiers ('@!P0 BRA 0x..' -> 'BRA')."""
        words = self.text.split()
        if words and words[0].startswith("@"):
            words = words[1:]
        return words[0].split(".")[0] if words else "?"


def _number(text):
    text = text.strip().replace(",", "")
    return int(float(text)) if text else 0


def read_instructions(rows):
    """The instructions of the CSV rows (the header row is the one that names 'Address')."""
    rows = list(rows)
    try:
        at = next(i for i, r in enumerate(rows) if "Address" in [c.strip() for c in r])
    except StopIteration:
        raise ValueError("no header row with an 'Address' column: not ncu's source page CSV")
    header = [c.strip() for c in rows[at]]
    need = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
    missing = [c for c in need if c not in header]
    if missing:
        raise ValueError("missing columns %s (take the report with --section SourceCounters "
                         "--section WarpStateStats)" % ", ".join(missing))
    col = {c: header.index(c) for c in need}
    reason_cols = {c[len("stall_"):]: i for i, c in enumerate(header)
                   if c.startswith("stall_") and "Not Issued" not in c}
    out = []
    for r in rows[at + 1:]:
        if len(r) <= max(col.values()):
            continue
        try:
            address = int(r[col["Address"]], 16)
        except ValueError:
            continue
        reasons = {k: _number(r[i]) for k, i in reason_cols.items() if i < len(r)}
        out.append(Instruction(address, r[col["Source"]].strip(),
                               _number(r[col["Warp Stall Sampling (All Samples)"]]),
                               _number(r[col["Instructions Executed"]]), reasons))
    if not out:
        raise ValueError("no instruction rows")
    first = min(i.offset for i in out)
    for i in out:
        i.offset -= first
    return out


def parse_region(text):
    """'NAME=0xSTART-0xEND' -> (NAME, START, END)."""
    name, sep, span = text.partition("=")
    start, dash, end = span.partition("-")
    if not sep or not dash or not name:
        raise argparse.ArgumentTypeError("--region wants NAME=START-END, got '%s'" % text)
    try:
        lo, hi = int(start, 16), int(end, 16)
    except ValueError:
        raise argparse.ArgumentTypeError("--region offsets are hex: '%s'" % text)
    if lo >= hi:
        raise argparse.ArgumentTypeError("--region start must be below its end: '%s'" % text)
    return name, lo, hi


def report(instructions, top=30, regions=()):
    """The summary's lines."""
    samples = sum(i.samples for i in instructions) or 1
    executed = sum(i.executed for i in instructions) or 1
    lines = ["instructions %d, warp samples %d, executed %.1f M" %
             (len(instructions), samples, executed / 1e6)]
    reasons = collections.Counter()
    for i in instructions:
        reasons.update(i.reasons)
    lines.append("stall reasons: " + ", ".join(
        "%s %.1f%%" % (k, 100.0 * v / samples) for k, v in reasons.most_common(10) if v))
    by_exec, by_samples = collections.Counter(), collections.Counter()
    for i in instructions:
        by_exec[i.opcode] += i.executed
        by_samples[i.opcode] += i.samples
    lines.append("opcode      executed%  samples%")
    for op, e in by_exec.most_common(20):
        lines.append("  %-10s %6.1f %9.1f" % (op, 100.0 * e / executed,
                                              100.0 * by_samples[op] / samples))
    for name, lo, hi in regions:
        inside = [i for i in instructions if lo <= i.offset < hi]
        lines.append("region %-24s samples %5.1f%%  executed %5.1f%%" % (
            name, 100.0 * sum(i.samples for i in inside) / samples,
            100.0 * sum(i.executed for i in inside) / executed))
    lines.append("most sampled (offset, samples%, executed, top reasons):")
    for i in sorted(instructions, key=lambda i: -i.samples)[:top]:
        two = sorted(i.reasons.items(), key=lambda kv: -kv[1])[:2]
        lines.append("  %06x %5.2f%% %10d  %-56s %s" % (
            i.offset, 100.0 * i.samples / samples, i.executed, i.text[:56],
            " ".join("%s:%d" % kv for kv in two if kv[1])))
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="ncu --page source --csv --print-source sass output (.gz ok)")
    parser.add_argument("--top", type=int, default=30, help="most sampled instructions to list")
    parser.add_argument("--region", type=parse_region, action="append", default=[],
                        help="NAME=START-END: hex byte offsets from the first instruction")
    args = parser.parse_args(argv)
    opener = gzip.open if args.csv.endswith(".gz") else open
    try:
        with opener(args.csv, "rt", newline="") as f:
            instructions = read_instructions(csv.reader(f))
    except (OSError, ValueError) as e:
        print("ncu_sass_report: %s: %s" % (args.csv, e), file=sys.stderr)
        return 1
    print("\n".join(report(instructions, args.top, args.region)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
