#!/usr/bin/env python3
"""test_perf_gate.py — the gate's statistics on synthetic repetitions (no benchmark binary needed).

Each case writes Google Benchmark JSON the way attncheck_bench does (per-repetition entries plus
aggregates the gate must ignore), records a baseline from one run and judges another:
a shifted run must fail, an unchanged one must pass, and a noisy but unchanged one must not
raise a false alarm. Run: python3 tests/gate/test_perf_gate.py (ctest runs it as gate:statistics).
"""

import json
import os
import random
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import perf_gate  # noqa: E402

REPS = perf_gate.MIN_REPETITIONS
# Run-to-run spread of a ratio (coefficient of variation over repetitions): 3% a quiet machine,
# 5% a busy CI runner. Above about THRESHOLD/2 the medians of 9 repetitions drift by more than the
# threshold too often; the gate then warns (docs/ci.md: more repetitions or a quieter runner).
QUIET_CV, NOISY_CV = 0.03, 0.05


def gbench_json(figures: dict, reps: int = REPS, cv: float = QUIET_CV, scale: float = 1.0,
                seed: int = 0) -> dict:
    """Benchmark JSON with `reps` repetitions of each benchmark; figures maps benchmark name to
    {counter: true value}. Values are drawn around value*scale with the given CV."""
    rng = random.Random(seed)
    entries = []
    for name, counters in figures.items():
        for i in range(reps):
            e = {"name": name, "run_name": name, "run_type": "iteration", "repetitions": reps,
                 "repetition_index": i, "real_time": 1.0, "cpu_time": 1.0, "time_unit": "ms"}
            for c, v in counters.items():
                e[c] = v * scale * (1.0 + rng.gauss(0.0, cv))
            entries.append(e)
        # The aggregates the binary appends: a gate that counted them would see 12 samples.
        for agg in ("mean", "median", "stddev", "cv"):
            entries.append({"name": f"{name}_{agg}", "run_name": name, "run_type": "aggregate",
                            "aggregate_name": agg, **{c: 123456.0 for c in counters}})
    return {"context": {"host_name": "synthetic", "num_cpus": 2}, "benchmarks": entries}


FIGURES = {
    "BM_AttentionPrefill/2048": {"frac_peak": 0.55, "gflops": 300.0},
    "BM_DecodeStep/1024": {"frac_bw": 0.80, "gbs": 40.0},
    "BM_PrefillSpeedup/512": {"speedup": 30.0},
}


class Gate(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name: str, obj: dict) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(obj, f)
        return path

    def baseline(self, **kw) -> str:
        run = self.write("base_run.json", gbench_json(FIGURES, seed=1, **kw))
        path = os.path.join(self.dir, "baseline.json")
        self.assertEqual(perf_gate.main(["record", "--current", run, "--baseline", path]), 0)
        return path

    def gate(self, run: dict, baseline: str, out: bool = False) -> int:
        args = ["compare", "--current", self.write("now.json", run), "--baseline", baseline]
        if out:
            args += ["--out", os.path.join(self.dir, "out")]
        return perf_gate.main(args)

    def test_unchanged_run_passes(self):
        base = self.baseline()
        self.assertEqual(self.gate(gbench_json(FIGURES, seed=2), base, out=True), 0)
        with open(os.path.join(self.dir, "out", "gate.svg")) as f:
            self.assertIn("<svg", f.read())
        with open(os.path.join(self.dir, "out", "gate.md")) as f:
            md = f.read()
        self.assertIn("PASS", md)
        self.assertIn("| BM_DecodeStep/1024 | frac_bw |", md)

    def test_twenty_percent_slowdown_fails(self):
        base = self.baseline()
        self.assertEqual(self.gate(gbench_json(FIGURES, seed=2, scale=0.8), base, out=True), 1)
        with open(os.path.join(self.dir, "out", "gate.json")) as f:
            rows = json.load(f)["rows"]
        self.assertEqual({r["verdict"] for r in rows}, {"REGRESSION"})
        for r in rows:
            self.assertLess(r["p_value"], perf_gate.ALPHA)
            self.assertLess(r["change"], -perf_gate.THRESHOLD)

    def test_one_figure_slower_fails_and_names_it(self):
        base = self.baseline()
        slow = gbench_json(FIGURES, seed=2)
        for e in slow["benchmarks"]:
            if e["run_name"] == "BM_DecodeStep/1024" and e["run_type"] == "iteration":
                e["frac_bw"] *= 0.7
        self.assertEqual(self.gate(slow, base, out=True), 1)
        with open(os.path.join(self.dir, "out", "gate.json")) as f:
            failed = [r for r in json.load(f)["rows"] if r["verdict"] == "REGRESSION"]
        self.assertEqual([(r["benchmark"], r["figure"]) for r in failed],
                         [("BM_DecodeStep/1024", "frac_bw")])

    def test_small_significant_drop_passes(self):
        # 5% slower with 1% noise: the U test is sure, but the change is under the threshold.
        base = self.baseline(cv=0.01)
        self.assertEqual(self.gate(gbench_json(FIGURES, seed=2, cv=0.01, scale=0.95), base), 0)

    def test_a_busy_machine_needs_a_larger_drop(self):
        # cv 15% (a runner shared with compiles): a 20% drop is within what the noise does to a
        # median; a halving is not.
        base = self.baseline(cv=0.15)
        self.assertEqual(self.gate(gbench_json(FIGURES, seed=2, cv=0.15, scale=0.8), base, True), 0)
        with open(os.path.join(self.dir, "out", "gate.json")) as f:
            self.assertTrue(all("noisy" in r["verdict"] for r in json.load(f)["rows"]))
        self.assertEqual(self.gate(gbench_json(FIGURES, seed=2, cv=0.15, scale=0.5), base), 1)

    def test_improvement_passes(self):
        base = self.baseline()
        self.assertEqual(self.gate(gbench_json(FIGURES, seed=2, scale=1.3), base), 0)

    def test_missing_benchmark_fails(self):
        base = self.baseline()
        fewer = {k: v for k, v in FIGURES.items() if k != "BM_DecodeStep/1024"}
        self.assertEqual(self.gate(gbench_json(fewer, seed=2), base), 1)

    def test_too_few_repetitions_is_an_error(self):
        base = self.baseline()
        self.assertEqual(self.gate(gbench_json(FIGURES, seed=2, reps=5), base), 2)

    def test_runs_of_separate_processes_are_pooled(self):
        # 3 processes x 3 repetitions = 9 samples per figure: enough together, not alone.
        base = self.baseline()
        runs = [self.write(f"p{i}.json", gbench_json(FIGURES, reps=3, seed=20 + i)) for i in range(3)]
        self.assertEqual(perf_gate.main(["compare", "--current", *runs, "--baseline", base]), 0)
        self.assertEqual(perf_gate.main(["compare", "--current", runs[0], "--baseline", base]), 2)
        slow = [self.write(f"s{i}.json", gbench_json(FIGURES, reps=3, seed=30 + i, scale=0.8))
                for i in range(3)]
        self.assertEqual(perf_gate.main(["compare", "--current", *slow, "--baseline", base]), 1)

    def test_record_refuses_too_few_repetitions(self):
        run = self.write("short.json", gbench_json(FIGURES, reps=3))
        path = os.path.join(self.dir, "b.json")
        self.assertEqual(perf_gate.main(["record", "--current", run, "--baseline", path]), 2)
        self.assertFalse(os.path.exists(path))

    def test_not_benchmark_json_is_an_error(self):
        base = self.baseline()
        self.assertEqual(self.gate({"hello": 1}, base), 2)

    def test_aggregates_are_ignored(self):
        samples = perf_gate.samples_from_run(gbench_json(FIGURES), "x")
        self.assertEqual(len(samples["BM_AttentionPrefill/2048"]["frac_peak"]), REPS)
        self.assertNotIn(123456.0, samples["BM_AttentionPrefill/2048"]["frac_peak"])

    def test_false_alarm_rate_and_power(self):
        # Many unchanged pairs on a noisy runner: the gate must (practically) never fail them.
        # Many 20%-slower pairs on the same runner: it must catch (practically) all of them.
        false_alarms = caught = 0
        trials = 200
        for s in range(trials):
            base = perf_gate.samples_from_run(gbench_json(FIGURES, cv=NOISY_CV, seed=1000 + s), "b")
            same = perf_gate.samples_from_run(gbench_json(FIGURES, cv=NOISY_CV, seed=5000 + s), "n")
            slow = perf_gate.samples_from_run(
                gbench_json(FIGURES, cv=NOISY_CV, scale=0.8, seed=9000 + s), "s")
            rows = perf_gate.compare(base, same, perf_gate.ALPHA, perf_gate.THRESHOLD)
            false_alarms += any(r.failed for r in rows)
            rows = perf_gate.compare(base, slow, perf_gate.ALPHA, perf_gate.THRESHOLD)
            caught += all(r.failed for r in rows)
        self.assertLessEqual(false_alarms, trials // 100, f"{false_alarms}/{trials} false alarms")
        self.assertGreaterEqual(caught, trials * 95 // 100, f"caught only {caught}/{trials}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
