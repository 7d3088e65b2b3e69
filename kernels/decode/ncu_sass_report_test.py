"""Tests of ncu_sass_report.py on a made-up CSV in ncu's source-page shape."""
import argparse
import contextlib
import csv
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncu_sass_report  # noqa: E402

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed", "stall_long_sb",
          "stall_wait", "stall_long_sb (Not Issued)"]
ROWS = [
    ["0x7f0000000000", "LDC R1, c[0x0][0x28]", "10", "10", "100", "0", "10", "0"],
    ["0x7f0000000010", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR18+0x36d40], R3", "20", "20",
     "1,000", "5", "15", "5"],
    ["0x7f0000000020", "@!P0  BRA 0x7f0000000010", "60", "60", "1,000", "58", "2", "58"],
    ["0x7f0000000030", "HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], R152", "10", "9", "8000",
     "0", "0", "0"],
]


def csv_text(rows):
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    writer.writerow(["Kernel Name", "void k(int)"])
    writer.writerow(HEADER)
    writer.writerows(rows)
    return out.getvalue()


class NcuSassReportTest(unittest.TestCase):

    def test_reads_offsets_opcodes_and_counts(self):
        got = ncu_sass_report.read_instructions(csv.reader(io.StringIO(csv_text(ROWS))))
        self.assertEqual([i.offset for i in got], [0, 0x10, 0x20, 0x30])
        self.assertEqual([i.opcode for i in got], ["LDC", "SYNCS", "BRA", "HGMMA"])
        self.assertEqual(got[1].executed, 1000)  # thousands separators read
        self.assertEqual(got[2].reasons, {"long_sb": 58, "wait": 2})  # not-issued columns apart

    def test_report_shares_and_regions(self):
        got = ncu_sass_report.read_instructions(csv.reader(io.StringIO(csv_text(ROWS))))
        lines = ncu_sass_report.report(got, top=1, regions=[("wait", 0x10, 0x30)])
        text = "\n".join(lines)
        self.assertIn("instructions 4, warp samples 100, executed 0.0 M", text)
        self.assertIn("stall reasons: long_sb 63.0%, wait 27.0%", text)
        region = next(line for line in lines if line.startswith("region wait "))
        self.assertRegex(region, r"samples +80\.0%  executed +19\.8%$")  # 2000 of 10100
        # HGMMA: 8000 of 10100 executions, 10 of 100 samples; the table is by executions.
        table = lines[lines.index("opcode      executed%  samples%") + 1:]
        self.assertEqual(table[0].split(), ["HGMMA", "79.2", "10.0"])
        self.assertEqual(table[1].split(), ["SYNCS", "9.9", "20.0"])
        most = lines[lines.index("most sampled (offset, samples%, executed, top reasons):") + 1:]
        self.assertEqual(len(most), 1)
        self.assertTrue(most[0].startswith("  000020 60.00%"), most[0])

    def test_rejects_what_is_not_a_source_page(self):
        with self.assertRaisesRegex(ValueError, "no header row"):
            ncu_sass_report.read_instructions(csv.reader(io.StringIO("a,b\n1,2\n")))
        no_samples = [c for c in HEADER if c != "Warp Stall Sampling (All Samples)"]
        text = ",".join('"%s"' % c for c in no_samples) + "\n"
        with self.assertRaisesRegex(ValueError, "SourceCounters"):
            ncu_sass_report.read_instructions(csv.reader(io.StringIO(text)))

    def test_region_flag(self):
        self.assertEqual(ncu_sass_report.parse_region("S=0x6000-0x8000"), ("S", 0x6000, 0x8000))
        for bad in ["S", "S=0x10", "=0x0-0x10", "S=0x20-0x10", "S=zz-0x10"]:
            with self.assertRaises(argparse.ArgumentTypeError):
                ncu_sass_report.parse_region(bad)

    def test_main_reads_gzip_and_reports_a_bad_file(self):
        import gzip
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sass.csv.gz")
            with gzip.open(path, "wt", newline="") as f:
                f.write(csv_text(ROWS))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(ncu_sass_report.main([path, "--top", "2"]), 0)
            self.assertIn("instructions 4, warp samples 100", out.getvalue())
            self.assertEqual(ncu_sass_report.main([os.path.join(d, "missing.csv")]), 1)


if __name__ == "__main__":
    unittest.main()
