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


MACHINE = {"cpu_model": "Synthetic CPU", "attncheck_isa": "avx2+fma",
           "attncheck_kernels": "portable", "cpu_count": "2"}


def gbench_json(figures: dict, reps: int = REPS, cv: float = QUIET_CV, scale: float = 1.0,
                seed: int = 0, machine: dict = MACHINE) -> dict:
    """Benchmark JSON with `reps` repetitions of each benchmark; figures maps benchmark name to
    {counter: true value}. Values are drawn around value*scale with the given CV."""
    rng = random.Random(seed)
    entries = []
    for name, counters in figures.items():
        for i in range(reps):
            # One draw per repetition moves all its figures alike: a slow repetition is slow
            # in time and in every rate.
            speed = scale * (1.0 + rng.gauss(0.0, cv))
            e = {"name": name, "run_name": name, "run_type": "iteration", "repetitions": reps,
                 "repetition_index": i, "real_time": 2.0 / speed, "cpu_time": 2.0 / speed,
                 "time_unit": "ms"}
            for c, v in counters.items():
                e[c] = v * speed
            entries.append(e)
        # The aggregates the binary appends: a gate that counted them would see 12 samples.
        for agg in ("mean", "median", "stddev", "cv"):
            entries.append({"name": f"{name}_{agg}", "run_name": name, "run_type": "aggregate",
                            "aggregate_name": agg, **{c: 123456.0 for c in counters}})
    return {"context": {"host_name": "synthetic", "num_cpus": 2, **machine}, "benchmarks": entries}


FIGURES = {
    "BM_AttentionPrefill/2048": {"frac_peak": 0.55, "gflops": 300.0},
    "BM_DecodeStep/1024": {"frac_bw": 0.80, "gbs": 40.0},
    "BM_PrefillSpeedup/512": {"speedup": 30.0},
}


class InTempDir(unittest.TestCase):
    """A case with its own temporary folder, and JSON files written into it."""

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


class Gate(InTempDir):

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

    def test_record_of_another_machine_is_not_judged(self):
        # An AVX-512 record against an AVX2 run: the figures are not comparable, so even a run
        # at half the record's figures passes, and says why.
        base = self.baseline()
        avx2_elsewhere = dict(MACHINE, attncheck_isa="avx512f+avx2+fma", cpu_model="Other CPU")
        import contextlib, io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = self.gate(gbench_json(FIGURES, seed=2, scale=0.5, machine=avx2_elsewhere), base)
        self.assertEqual(code, 0)
        self.assertIn("not judged", out.getvalue())
        self.assertIn("attncheck_isa", out.getvalue())

    def test_record_without_fingerprint_is_refused(self):
        run = gbench_json(FIGURES, seed=1)
        for k in MACHINE:
            del run["context"][k]
        path = os.path.join(self.dir, "b.json")
        self.assertEqual(perf_gate.main(["record", "--current", self.write("r.json", run),
                                         "--baseline", path]), 2)


class AB(InTempDir):
    """The same-run A/B mode: pairs of processes, A the base and B the change."""

    def runs(self, side: str, pairs: int = 8, seed: int = 0, **kw) -> list[str]:
        return [self.write(f"{side}-{i}.json", gbench_json(FIGURES, reps=3, seed=seed + i, **kw))
                for i in range(pairs)]

    def ab(self, a: list[str], b: list[str]) -> int:
        return perf_gate.main(["ab", "--a", *a, "--b", *b, "--out", os.path.join(self.dir, "out")])

    def rows(self) -> list[dict]:
        with open(os.path.join(self.dir, "out", "gate.json")) as f:
            return json.load(f)["rows"]

    def test_unchanged_passes(self):
        self.assertEqual(self.ab(self.runs("a", seed=10), self.runs("b", seed=20)), 0)
        with open(os.path.join(self.dir, "out", "gate.md")) as f:
            self.assertIn("PASS", f.read())

    def test_twenty_percent_slower_fails_every_figure(self):
        self.assertEqual(self.ab(self.runs("a", seed=10), self.runs("b", seed=20, scale=0.8)), 1)
        self.assertEqual({r["verdict"] for r in self.rows()}, {"REGRESSION"})

    def test_one_figure_slower_fails_and_names_it(self):
        b = self.runs("b", seed=20)
        for path in b:
            with open(path) as f:
                run = json.load(f)
            for e in run["benchmarks"]:
                if e["run_name"] == "BM_DecodeStep/1024" and e["run_type"] == "iteration":
                    e["real_time"] /= 0.85
            with open(path, "w") as f:
                json.dump(run, f)
        self.assertEqual(self.ab(self.runs("a", seed=10), b), 1)
        self.assertEqual([(r["benchmark"], r["figure"]) for r in self.rows()
                          if r["verdict"] == "REGRESSION"], [("BM_DecodeStep/1024", "rate")])

    def test_improvement_and_small_drop_pass(self):
        self.assertEqual(self.ab(self.runs("a", seed=10), self.runs("b", seed=20, scale=1.3)), 0)
        # 3% slower at 1% noise: significant, but under the 5% threshold.
        self.assertEqual(self.ab(self.runs("a", seed=10, cv=0.01),
                                 self.runs("b", seed=20, cv=0.01, scale=0.97)), 0)
        self.assertTrue(all(r["verdict"] == "ok (small drop)" for r in self.rows()))

    def test_process_is_the_unit(self):
        # 3 pairs can never reach p < 0.01/3 (1/C(6,3) = 0.05): refused, with the number needed.
        import contextlib, io
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = self.ab(self.runs("a", pairs=3, seed=10), self.runs("b", pairs=3, seed=20, scale=0.5))
        self.assertEqual(code, 2)
        self.assertIn("use at least", err.getvalue())
        # One lucky process does not make a regression: B's processes all slow by 30% but one,
        # which is twice as fast (10 pairs): the median over processes still shows the drop.
        a = [perf_gate.samples_from_run(gbench_json(FIGURES, reps=3, seed=i), "a") for i in range(10)]
        b = [perf_gate.samples_from_run(gbench_json(FIGURES, reps=3, seed=50 + i,
                                                    scale=2.0 if i == 0 else 0.7), "b")
             for i in range(10)]
        rows = perf_gate.ab_compare(a, b, perf_gate.AB_FAMILY_ALPHA, perf_gate.AB_THRESHOLD)
        self.assertTrue(all(r.verdict == "REGRESSION" for r in rows), [r.verdict for r in rows])
        self.assertEqual(len(rows[0].now), 10)  # one value per process, not per repetition

    def test_unpaired_or_mismatched_runs_are_errors(self):
        a = self.runs("a", seed=10)
        self.assertEqual(self.ab(a, self.runs("b", pairs=5, seed=20)), 2)
        other = self.runs("b", seed=20, machine=dict(MACHINE, cpu_model="Other CPU"))
        self.assertEqual(self.ab(a, other), 2)

    def test_figure_missing_in_b_fails(self):
        b = self.runs("b", seed=20)
        with open(b[0]) as f:
            run = json.load(f)
        names = {e["run_name"] for e in run["benchmarks"]}
        for path in b:
            with open(path) as f:
                run = json.load(f)
            run["benchmarks"] = [e for e in run["benchmarks"] if e["run_name"] != "BM_DecodeStep/1024"]
            with open(path, "w") as f:
                json.dump(run, f)
        self.assertIn("BM_DecodeStep/1024", names)
        self.assertEqual(self.ab(self.runs("a", seed=10), b), 1)

    def test_power_estimate_from_noise(self):
        # A/A runs at cv 3%: the resampled gate must (practically) never fail at s = 0 and catch
        # a 30% slowdown of each figure practically always.
        a, b = self.runs("a", pairs=16, seed=10), self.runs("b", pairs=16, seed=40)
        out = os.path.join(self.dir, "power.json")
        import contextlib, io
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(perf_gate.main(["power", "--a", *a, "--b", *b, "--trials", "200",
                                             "--pairs", "8", "--slowdowns", "0.3", "--out", out]), 0)
        with open(out) as f:
            rates = json.load(f)["rates"]
        self.assertLessEqual(rates["0"]["any_figure"], 0.02)
        self.assertTrue(all(v >= 0.95 for v in rates["0.3"]["per_figure"].values()),
                        rates["0.3"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
