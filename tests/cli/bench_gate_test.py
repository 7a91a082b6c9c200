#!/usr/bin/env python3
"""tests/cli/bench_gate_test.py — `attncheck bench --json` as tools/perf_gate.py reads it.

Runs the built command twice (9 short repetitions of prefill-512, the fewest the gate's U test
accepts), records a baseline from the first run and judges the second with `perf_gate.py record`
and `compare`, exactly as ci/perf_gate.sh does with the benchmark binary's JSON; then reads an
A/B run (a baseline kernel in the same process) with the gate's own reader. The verdict of the
comparison is not asserted (this machine's noise decides it): only that the gate accepts the
files, finds the same benchmarks and judges their figures. Usage: bench_gate_test.py ATTNCHECK
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
sys.path.insert(0, TOOLS)
import perf_gate  # noqa: E402

CLI = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ATTNCHECK_CLI", "")
QUICK = ["--threads", "1", "--min-time", "0.005", "--shapes", "prefill-512"]


def bench(out: str, *extra: str) -> None:
    r = subprocess.run([CLI, "bench", *QUICK, "--json", out, *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"attncheck bench exit {r.returncode}\n{r.stdout}\n{r.stderr}")


class BenchJsonInTheGate(unittest.TestCase):
    def test_record_then_compare(self):
        with tempfile.TemporaryDirectory() as d:
            runs = [os.path.join(d, f"run{i}.json") for i in (1, 2)]
            for run in runs:
                bench(run, "--reps", str(perf_gate.MIN_REPETITIONS))
            base = os.path.join(d, "base.json")
            self.assertEqual(perf_gate.main(["record", "--current", runs[0], "--baseline", base]), 0)
            recorded = perf_gate.load_baseline(base)["benchmarks"]
            self.assertEqual(sorted(recorded), ["attncheck_bench/prefill-512/threads:1"])
            self.assertEqual(len(recorded["attncheck_bench/prefill-512/threads:1"]["frac_peak"]),
                             perf_gate.MIN_REPETITIONS)
            rc = perf_gate.main(["compare", "--current", runs[1], "--baseline", base,
                                 "--out", os.path.join(d, "gate")])
            self.assertIn(rc, (0, 1))  # judged (pass or regression), not unusable input (2)
            with open(os.path.join(d, "gate", "gate.json"), encoding="utf-8") as f:
                self.assertIn("frac_peak", f.read())

    def test_ab_run_counters(self):
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "ab.json")
            bench(run, "--reps", "2", "--baseline-kernel", "optimized", "--allow-unjudged")
            samples = perf_gate.samples_from_run(perf_gate.load_json(run), run)
            cand = samples["attncheck_bench/prefill-512/threads:1"]
            self.assertEqual(len(cand["speedup"]), 2)
            self.assertEqual(len(cand[perf_gate.AB_FIGURE]), 2)
            self.assertIn("attncheck_bench_baseline/prefill-512/threads:1", samples)


if __name__ == "__main__":
    if not CLI:
        sys.exit("usage: bench_gate_test.py PATH/TO/attncheck")
    unittest.main(argv=sys.argv[:1])
