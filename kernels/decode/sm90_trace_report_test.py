"""Tests of sm90_trace_report.py on a made-up timeline, and of its layout against the probe's."""
import array
import contextlib
import io
import os
import re
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sm90_trace_report as report  # noqa: E402


def trace_words(events):
    """events: {(cta, role, block, tag): cycles} -> the probe's array of words."""
    words = array.array("I", [0] * (report.CTAS * report.ROLES * report.BLOCKS * report.TAGS))
    for (cta, role, n, tag), cycles in events.items():
        words[((cta * report.ROLES + role) * report.BLOCKS + n) * report.TAGS + tag] = cycles
    return words


def run_report(words, *args):
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        f.write(words.tobytes())
        path = f.name
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            rc = report.main(["sm90_trace_report.py", path] + [str(a) for a in args])
    finally:
        os.unlink(path)
    return rc, out.getvalue()


class Sm90TraceReportTest(unittest.TestCase):

    def test_layout_matches_the_probe(self):
        with open(os.path.join(HERE, "mla_decode_sm90_probe.h")) as f:
            header = f.read()
        consts = dict(re.findall(r"kSm90Trace(Ctas|Roles|Blocks|Tags) = (\d+)", header))
        self.assertEqual((report.CTAS, report.ROLES, report.BLOCKS, report.TAGS),
                         tuple(int(consts[k]) for k in ("Ctas", "Roles", "Blocks", "Tags")))
        role = re.search(r"kSm90TraceConverterRole = (\d+)", header)
        self.assertEqual(int(role.group(1)), 3)
        for name, tag in (("Landed0", 1), ("Landed4", 2), ("Landed8", 3)):
            self.assertRegex(header, r"kTrace%s = %d\b" % (name, tag))
        for tag, name in ((12, "Tma0"), (13, "Tma4"), (15, "Tma8Issued")):
            self.assertRegex(header, r"kTrace%s = %d\b" % (name, tag))

    def test_load_latencies_and_converter_cells(self):
        events = {}
        for n in range(130):
            t = 1000 + 4500 * n
            events[(0, 0, n, 9)] = t + 900  # consumer A's P V end: the period
            events[(0, 2, n, 12)] = t  # TMA of position 0
            events[(0, 2, n, 13)] = t + 1000  # position 4
            events[(0, 2, n, 15)] = t + 2000  # position 8, issued
            events[(0, 3, n, 1)] = t + 1500  # landed: 1.5, 2.0, 2.5 kcycles after
            events[(0, 3, n, 2)] = t + 3000
            events[(0, 3, n, 3)] = t + 4500
        rc, out = run_report(trace_words(events), 0, 40, 1)
        self.assertEqual(rc, 0)
        self.assertIn("V.l0=", out)
        self.assertIn("V.l8=", out)
        self.assertIn("position 0 1.50, 4 2.00, 8 2.50 (kcycles)", out)
        self.assertIn("period 4.500 kcycles a kv block", out)

    def test_refuses_a_file_of_another_size(self):
        rc, out = run_report(array.array("I", [1, 2, 3]))
        self.assertEqual(rc, 1)
        self.assertIn("expected", out)


if __name__ == "__main__":
    unittest.main()
