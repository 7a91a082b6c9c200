#!/usr/bin/env python3
"""perf_gate.py — the performance-regression gate: Google Benchmark JSON, judged two ways.

`ab`, the gate (ci/perf_gate.sh runs it by default): the runs of two builds, A (the base
commit) and B (the change), made on the same machine in the same minutes, process after
process, interleaved. Like is compared with like, so nothing needs to be portable. Each
benchmark is judged by its rate (iterations per second of wall time), one value per process
(its fastest repetition), and a rate regresses when both hold:
  - a one-sided Mann-Whitney U test of B's processes against A's gives p < AB_FAMILY_ALPHA
    divided by the number of judged rates (Bonferroni: the whole gate raises a false alarm on an
    unchanged build in at most about one run in a hundred);
  - the median over B's processes is more than AB_THRESHOLD below A's.
`power` estimates what that rule catches, from A/A runs (one build on both sides).

`compare`, a record across time: one run against a committed record (`record`), only when the
record's machine fingerprint (CPU model, instruction set of the code, CPU count) matches the
run's. A fraction of a machine's peak is still not comparable across instruction sets (an
AVX-512 record against an AVX2 run read as a 90% "regression" of an unchanged build), so with
another fingerprint it says so and passes. It compares the counters the benchmark binary
computes against its own calibrations in the same process:

    frac_peak  useful GFLOP/s as a fraction of the FMA peak measured by the same run (1.0 = peak)
    frac_bw    bytes moved per second as a fraction of the measured DRAM bandwidth (1.0 = peak)
    speedup    optimized over reference on the same work

and a figure regresses when a one-sided U test over the repetitions gives p < ALPHA, the median
fell by more than THRESHOLD, and by more than NOISE_FACTOR times the repetitions' spread (a
machine too busy to measure cannot fail the build by itself: the verdict says "noisy").

Subcommands:
  ab      --a A1.json A2.json... --b B1.json B2.json... --out DIR  (A_i and B_i: pair i)
  power   --a A*.json --b B*.json [--pairs N] [--slowdowns 0.05,0.1]  (A/A runs of one build)
  compare --current RUN.json... --baseline BASE.json --out DIR
  record  --current RUN.json... --baseline BASE.json             writes the record
`ab` and `compare` print a table and write DIR/gate.md, DIR/gate.svg, DIR/gate.json; exit 0
pass, 1 regression, 2 unusable input.

Usage from CI: ci/perf_gate.sh (builds the base, runs the benchmarks, then this script).
See docs/ci.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys

from gate_report import Row, context_lines, table_lines, write_chart, write_reports

# A drop must be this unlikely under "no change" before it counts (one-sided U test).
ALPHA = 0.05
# ... and the median must fall by more than this fraction. 10% is above the run-to-run spread of
# the ratios on a quiet machine (see docs/ci.md) and well below the slowdowns worth catching.
THRESHOLD = 0.10
# Google Benchmark's compare.py calls 9 the lowest reasonable number of repetitions for the U
# test; with 9 against 9 the smallest attainable one-sided p is 1/C(18,9) ~ 2e-5.
MIN_REPETITIONS = 9
# A drop must also exceed this many times the larger coefficient of variation of the two samples.
# The median of 9 repetitions with spread cv moves by about 0.6*cv between two unchanged runs, so
# 2*cv is about 3.4 standard deviations: a false alarm in a few thousand figures. At cv <= 5%
# (a quiet machine) THRESHOLD decides; above, the noise does, and the verdict says "noisy".
NOISE_FACTOR = 2.0
NOISY_CV = THRESHOLD / NOISE_FACTOR

BASELINE_FORMAT = "attncheck-perf-baseline-2"
# What makes two runs' figures comparable at all: the same CPU, the same code path, as many CPUs.
# Written by bench/main.cpp into the JSON context.
FINGERPRINT_KEYS = ("cpu_model", "attncheck_isa", "attncheck_kernels", "cpu_count")

# The gated counters, all "higher is better", and what each is a fraction of (None: a ratio that
# has no machine peak, drawn only against the baseline).
GATED_COUNTERS = {
    "frac_peak": "FMA peak",
    "frac_bw": "DRAM bandwidth",
    "speedup": None,
}
# Calibrations reported beside the table for context only (machine-dependent, never gated).
CONTEXT_COUNTERS = ("gflops", "gbs", "tokens_per_s")

EXIT_PASS, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2

# The A/B mode judges one figure per benchmark: its rate, iterations per second of wall time
# (1 / real_time), the same work on both sides. Fractions of a peak are for comparisons across
# time; within one run they only add the noise of each process's own calibration (measured on
# this project's 2-vCPU machine: the spread of A/A process pairs was 1.2-1.7x larger for frac_bw
# and frac_peak than for the raw rates of the same benchmarks).
AB_FIGURE = "rate"
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# The benchmarks that measure the machine rather than the code: context, never judged.
CALIBRATIONS = ("BM_FmaPeak", "BM_DramRead")
# The chance that an unchanged build fails the A/B gate, for all its figures together: each
# figure is tested at AB_FAMILY_ALPHA / (number of figures) (Bonferroni), so a CI that runs the
# gate on every change sees a false alarm in at most about one run in a hundred.
AB_FAMILY_ALPHA = 0.01
# ... and its median over the processes must drop by more than this: a real but tiny change (a
# compiler update moving code alignment) does not fail the build.
AB_THRESHOLD = 0.05


class GateError(Exception):
    """Input the gate cannot judge (no repetitions, a benchmark that vanished, a bad file)."""


# ---------------------------------------------------------------------------------------------
# Reading runs and baselines


def load_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise GateError(f"{path}: cannot read: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise GateError(f"{path}: not JSON: {e}") from e


def samples_from_run(run: dict, what: str) -> dict[str, dict[str, list[float]]]:
    """Google Benchmark JSON -> {benchmark: {counter: [value per repetition]}}.

    Only the per-repetition entries (run_type "iteration") are used; the aggregates (mean,
    median, stddev, cv) that the binary also writes would count the same data twice.
    """
    if "benchmarks" not in run or not isinstance(run["benchmarks"], list):
        raise GateError(f"{what}: no 'benchmarks' list: not Google Benchmark JSON output")
    out: dict[str, dict[str, list[float]]] = {}
    for b in run["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        if "error_occurred" in b and b["error_occurred"]:
            raise GateError(f"{what}: benchmark {b.get('name')} reported an error: "
                            f"{b.get('error_message', '?')}")
        name = b.get("run_name") or b["name"]
        for counter in list(GATED_COUNTERS) + list(CONTEXT_COUNTERS):
            if counter in b:
                v = float(b[counter])
                if not math.isfinite(v):
                    raise GateError(f"{what}: {name} counter {counter} is {v}")
                out.setdefault(name, {}).setdefault(counter, []).append(v)
        # The A/B figure: iterations per second of wall time.
        seconds = float(b.get("real_time", 0.0)) * TIME_UNITS.get(b.get("time_unit", "ns"), 0.0)
        if seconds > 0 and math.isfinite(seconds):
            out.setdefault(name, {}).setdefault(AB_FIGURE, []).append(1.0 / seconds)
    return out


def fingerprint(context: dict, what: str) -> dict:
    missing = [k for k in FINGERPRINT_KEYS if k not in context]
    if missing:
        raise GateError(f"{what}: the run's context lacks {', '.join(missing)}: a benchmark binary "
                        "older than the fingerprint (bench/main.cpp writes it)")
    return {k: context[k] for k in FINGERPRINT_KEYS}


def load_baseline(path: str) -> dict:
    base = load_json(path)
    if base.get("format") != BASELINE_FORMAT:
        raise GateError(f"{path}: format is {base.get('format')!r}, expected {BASELINE_FORMAT!r}; "
                        "record a new baseline with ci/perf_gate.sh --record")
    return base


def samples_from_runs(paths: list[str]) -> tuple[dict[str, dict[str, list[float]]], dict]:
    """Pools the repetitions of several runs; returns them and the first run's context."""
    pooled: dict[str, dict[str, list[float]]] = {}
    context: dict = {}
    for path in paths:
        run = load_json(path)
        context = context or run.get("context", {})
        for name, counters in samples_from_run(run, path).items():
            for c, values in counters.items():
                pooled.setdefault(name, {}).setdefault(c, []).extend(values)
    return pooled, context


def record(run_paths: list[str], baseline_path: str) -> int:
    run_path = " + ".join(run_paths)
    samples, ctx = samples_from_runs(run_paths)
    gated = {name: cs for name, cs in samples.items() if any(c in GATED_COUNTERS for c in cs)}
    if not gated:
        raise GateError(f"{run_path}: no benchmark reports any of {', '.join(GATED_COUNTERS)}")
    for name, cs in gated.items():
        n = min(len(v) for c, v in cs.items() if c in GATED_COUNTERS)
        if n < MIN_REPETITIONS:
            raise GateError(f"{run_path}: {name} has {n} repetitions, the U test needs at least "
                            f"{MIN_REPETITIONS} (--benchmark_repetitions)")
    base = {
        "format": BASELINE_FORMAT,
        "fingerprint": fingerprint(ctx, run_path),
        "recorded": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host_name": ctx.get("host_name"),
            "num_cpus": ctx.get("num_cpus"),
            "mhz_per_cpu": ctx.get("mhz_per_cpu"),
            "library_build_type": ctx.get("library_build_type"),
            "git_commit": os.environ.get("ATTNCHECK_GIT_COMMIT"),
            "runs": len(run_paths),
            "note": "machine-dependent figures (gflops, gbs, tokens_per_s) are kept for context "
                    "only; the gate compares frac_peak, frac_bw and speedup",
        },
        "benchmarks": gated,
    }
    os.makedirs(os.path.dirname(os.path.abspath(baseline_path)), exist_ok=True)
    with open(baseline_path, "w", encoding="utf-8") as f:
        json.dump(base, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"perf_gate: recorded {len(gated)} benchmarks into {baseline_path}")
    return EXIT_PASS


# ---------------------------------------------------------------------------------------------
# The decision


def judge(base: list[float], now: list[float], alpha: float, threshold: float
          ) -> tuple[str, float, float]:
    """Verdict for one higher-is-better figure, with the two one-sided p-values."""
    from scipy.stats import mannwhitneyu  # imported here so --help works without scipy

    if len(base) < MIN_REPETITIONS or len(now) < MIN_REPETITIONS:
        raise GateError(f"{len(base)} baseline and {len(now)} current repetitions: the U test "
                        f"needs at least {MIN_REPETITIONS} of each")
    # Identical samples (e.g. a ratio that is a constant) make the U statistic degenerate;
    # scipy then returns p = 1 for both sides, which is the right answer: no evidence of change.
    p_worse = float(mannwhitneyu(now, base, alternative="less").pvalue)
    p_better = float(mannwhitneyu(now, base, alternative="greater").pvalue)
    mb, mn = statistics.median(base), statistics.median(now)
    change = mn / mb - 1.0 if mb != 0 else 0.0
    cv = max(cv_of(base), cv_of(now))
    needed = max(threshold, NOISE_FACTOR * cv)
    noisy = f" (noisy: cv {cv:.0%}, needs a {needed:.0%} drop)" if cv > NOISY_CV else ""
    if p_worse < alpha and change < -needed:
        return "REGRESSION" + noisy, p_worse, p_better
    if p_better < alpha and change > needed:
        return "improved" + noisy, p_worse, p_better
    if p_worse < alpha:
        return "ok (small drop)" + noisy, p_worse, p_better
    return "ok" + noisy, p_worse, p_better


def cv_of(values: list[float]) -> float:
    mean = statistics.fmean(values)
    return statistics.stdev(values) / abs(mean) if len(values) >= 2 and mean != 0 else 0.0


def compare(base_samples: dict, now_samples: dict, alpha: float, threshold: float) -> list[Row]:
    rows: list[Row] = []
    for name in sorted(set(base_samples) | set(now_samples)):
        b_counters = base_samples.get(name, {})
        n_counters = now_samples.get(name, {})
        for counter in GATED_COUNTERS:
            if counter not in b_counters and counter not in n_counters:
                continue
            row = Row(name, counter, list(b_counters.get(counter, [])),
                      list(n_counters.get(counter, [])))
            if not row.now:
                # A gated figure that vanished would let a regression through by renaming a
                # benchmark: fail, and say how to accept it on purpose.
                row.verdict = "MISSING now (re-record the baseline if intended)"
            elif not row.base:
                row.verdict = "new (not in baseline)"
            else:
                row.verdict, row.p_worse, row.p_better = judge(row.base, row.now, alpha, threshold)
            rows.append(row)
    return rows


def run_compare(args: argparse.Namespace) -> int:
    base = load_baseline(args.baseline)
    now_samples, now_context = samples_from_runs(args.current)
    current = " + ".join(args.current)
    mine = fingerprint(now_context, current)
    theirs = base.get("fingerprint", {})
    if mine != theirs:
        diff = ", ".join(f"{k} {theirs.get(k)!r} there, {mine.get(k)!r} here"
                         for k in FINGERPRINT_KEYS if theirs.get(k) != mine.get(k))
        print(f"perf gate: PASS — not judged: {args.baseline} was recorded on another machine or "
              f"code path ({diff}); its figures are not comparable with this run's. Record one "
              "here (ci/perf_gate.sh --record) or use the A/B gate (ci/perf_gate.sh).")
        return EXIT_PASS
    base_samples = base["benchmarks"]
    rows = compare(base_samples, now_samples, args.alpha, args.threshold)
    if not any(r.base and r.now for r in rows):
        raise GateError(f"no gated benchmark of {args.baseline} appears in {current}; "
                        "is the benchmark filter right?")
    failed = [r for r in rows if r.failed]
    verdict = "FAIL" if failed else "PASS"

    header = (f"perf gate: {verdict} — {len(rows)} figures, {len(failed)} regressed "
              f"(regression = one-sided Mann-Whitney p < {args.alpha} and median drop > "
              f"{args.threshold:.0%})")
    print(header)
    print("\n".join(table_lines(rows, markdown=False)))

    if args.out:
        os.makedirs(args.out, exist_ok=True)
        chart = os.path.join(args.out, "gate.svg")
        write_chart(rows, chart, args.alpha, args.threshold, peak_counters=GATED_COUNTERS)
        rec = base.get("recorded", {})
        md = [f"# Performance gate: {verdict}", "",
              f"Baseline `{args.baseline}` (recorded {rec.get('date')} on {rec.get('host_name')}, "
              f"{rec.get('num_cpus')} CPUs); run `{current}`.", "",
              f"A figure regresses when a one-sided Mann-Whitney U test over the repetitions gives "
              f"p < {args.alpha} **and** its median dropped by more than {args.threshold:.0%}. "
              "Figures are fractions of this machine's own measured peaks, or speed-ups, never "
              "raw times.", "",
              "![now against baseline and against the peak](gate.svg)", ""]
        md += table_lines(rows, markdown=True)
        ctx = context_lines(base, now_samples)
        if ctx:
            md += ["", "Calibrations (machine-dependent, not gated):", ""] + ctx
        write_reports(args.out, md, {"verdict": verdict, "alpha": args.alpha,
                                     "threshold": args.threshold}, rows)
        print(f"perf gate: wrote {chart} and {os.path.join(args.out, 'gate.md')}")
    return EXIT_REGRESSION if failed else EXIT_PASS


# ---------------------------------------------------------------------------------------------
# A/B: two builds measured in the same run


def per_run_samples(paths: list[str]) -> tuple[list[dict], dict]:
    """One {benchmark: {counter: [repetitions]}} per run (process), and the first run's context."""
    runs, context = [], {}
    for path in paths:
        run = load_json(path)
        context = context or run.get("context", {})
        runs.append(samples_from_run(run, path))
    return runs, context


def per_process(runs: list[dict], name: str, counter: str, scale: float = 1.0,
                how: str = "max") -> list[float]:
    """One value per process: the best (largest) of its repetitions, or their median.

    The process is the unit of the A/B test: on the 2-vCPU machines this project measured, the
    repetitions inside one process agree within a few percent while separate processes of the
    same binary differ by 20-40% on some figures (what the host did meanwhile, where the buffers
    landed); pooling repetitions would count one process's luck several times and make the test
    overconfident. Within a process, interference only ever slows a repetition down, so the
    fastest repetition is the one least disturbed ("max", the default)."""
    pick = max if how == "max" else statistics.median
    return [pick(r[name][counter]) * scale for r in runs if r.get(name, {}).get(counter)]


def min_p(n_a: int, n_b: int) -> float:
    """The smallest one-sided p-value a U test of n_a against n_b values can give."""
    return 1.0 / math.comb(n_a + n_b, n_a)


def judge_ab(a: list[float], b: list[float], alpha: float, threshold: float
             ) -> tuple[str, float, float]:
    """Verdict for one rate from one value per process of each side, with the two one-sided
    p-values of the Mann-Whitney U test. (A paired alternative, the signed-rank test of
    log(B_i / A_i) over adjacent processes, was measured on the same A/A runs and caught less:
    a single disturbed process turns its pair's sign at random, whatever the slowdown.)"""
    from scipy.stats import mannwhitneyu

    p_worse = float(mannwhitneyu(b, a, alternative="less").pvalue)
    p_better = float(mannwhitneyu(b, a, alternative="greater").pvalue)
    ma, mb = statistics.median(a), statistics.median(b)
    change = mb / ma - 1.0 if ma != 0 else 0.0
    if p_worse < alpha and change < -threshold:
        return "REGRESSION", p_worse, p_better
    if p_better < alpha and change > threshold:
        return "improved", p_worse, p_better
    if p_worse < alpha:
        return "ok (small drop)", p_worse, p_better
    return "ok", p_worse, p_better


def ab_compare(a_runs: list[dict], b_runs: list[dict], family_alpha: float, threshold: float,
               b_scale: float = 1.0, how: str = "max") -> list[Row]:
    """Rows for every benchmark of either side (its rate; calibrations excluded): A is the base,
    B the change. b_scale multiplies B's figures (the power estimate's simulated slowdown).
    Row.base / Row.now hold one value per process."""
    names = sorted({n for r in a_runs + b_runs for n in r if not n.startswith(CALIBRATIONS)})
    alpha = family_alpha / max(1, len(names))
    if names and min_p(len(a_runs), len(b_runs)) >= alpha:
        need = next(n for n in range(2, 100) if min_p(n, n) < alpha)
        raise GateError(f"{len(a_runs)} process pairs cannot show p < {alpha:.2g} (the family "
                        f"alpha {family_alpha} over {len(names)} figures): use at least {need}")
    rows: list[Row] = []
    for name in names:
        a = per_process(a_runs, name, AB_FIGURE, how=how)
        b = per_process(b_runs, name, AB_FIGURE, b_scale, how=how)
        row = Row(name, AB_FIGURE, a, b)
        if len(b) < len(b_runs):
            # A gated benchmark that vanished would let a regression through by renaming it.
            row.verdict = "MISSING in B (renamed or removed?)"
        elif len(a) < len(a_runs):
            row.verdict = "new (not in A)"
        else:
            row.verdict, row.p_worse, row.p_better = judge_ab(a, b, alpha, threshold)
        rows.append(row)
    return rows


def run_ab(args: argparse.Namespace) -> int:
    if len(args.a) != len(args.b):
        raise GateError(f"{len(args.a)} A runs and {len(args.b)} B runs: they come in pairs")
    a_runs, a_ctx = per_run_samples(args.a)
    b_runs, b_ctx = per_run_samples(args.b)
    for k in FINGERPRINT_KEYS:
        if k in a_ctx and k in b_ctx and a_ctx[k] != b_ctx[k] and k != "attncheck_kernels":
            raise GateError(f"A and B ran on different machines or code paths: {k} "
                            f"{a_ctx[k]!r} against {b_ctx[k]!r}")
    rows = ab_compare(a_runs, b_runs, args.alpha, args.threshold, how=args.per_process)
    if not any(r.base and r.now for r in rows):
        raise GateError("no gated figure appears in both A and B; is the benchmark filter right?")
    failed = [r for r in rows if r.failed]
    verdict = "FAIL" if failed else "PASS"
    machine = f"{b_ctx.get('cpu_model', '?')}, isa {b_ctx.get('attncheck_isa', '?')}, " \
              f"{b_ctx.get('cpu_count', b_ctx.get('num_cpus', '?'))} cpus"
    header = (f"perf gate: {verdict} — B against A, {len(args.a)} interleaved process pairs on "
              f"{machine}; {len(rows)} rates, {len(failed)} regressed (regression = one-sided "
              f"Mann-Whitney U over the processes p < {args.alpha}/{len(rows)} and median drop > "
              f"{args.threshold:.0%})")
    print(header)
    print(f"  A = {args.a_label}\n  B = {args.b_label}")
    print("\n".join(table_lines(rows, markdown=False, names=("A (median)", "B (median)"))))
    ctx = calibration_lines(a_runs, b_runs)
    print("\n".join(["calibrations (the machine during each side, not gated):"] + ctx))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        chart = os.path.join(args.out, "gate.svg")
        write_chart(rows, chart, args.alpha, args.threshold, names=("A", "B"))
        md = [f"# Performance gate: {verdict}", "", header, "",
              f"- A = {args.a_label}", f"- B = {args.b_label}", "",
              "![B against A](gate.svg)", ""]
        md += table_lines(rows, markdown=True, names=("A (median)", "B (median)"))
        md += ["", "Calibrations (the machine during each side, not gated):", ""] + ctx
        write_reports(args.out, md, {"verdict": verdict, "mode": "ab", "alpha": args.alpha,
                                     "threshold": args.threshold, "a": args.a_label,
                                     "b": args.b_label, "machine": machine,
                                     "pairs": len(args.a)},
                      rows, ("a_median", "b_median"))
        print(f"perf gate: wrote {chart} and {os.path.join(args.out, 'gate.md')}")
    return EXIT_REGRESSION if failed else EXIT_PASS


def calibration_lines(a_runs: list[dict], b_runs: list[dict]) -> list[str]:
    out = []
    for name in sorted({n for r in a_runs + b_runs for n in r}):
        if not name.startswith(("BM_FmaPeak", "BM_DramRead")):
            continue
        for c in ("gflops", "gbs"):
            a, b = per_process(a_runs, name, c), per_process(b_runs, name, c)
            if a and b:
                out.append(f"- {name} {c}: A {statistics.median(a):.1f} "
                           f"({min(a):.1f}-{max(a):.1f}), B {statistics.median(b):.1f} "
                           f"({min(b):.1f}-{max(b):.1f})")
    return out


def run_power(args: argparse.Namespace) -> int:
    """Detection rate of the ab rule for simulated slowdowns, by resampling A/A process pairs.

    The runs are of one build on both sides, so their differences are the machine's noise alone.
    Each trial draws --pairs of the measured pairs (without replacement when there are enough;
    each pair's sides swapped at random: A/A is symmetric) and divides B's figures by 1 + s, what a
    slowdown that makes every timed call s longer does to a rate, then applies the ab rule. A
    figure's power is the fraction of trials in which that figure alone is flagged: the chance
    that a slowdown of that one figure fails the gate. s = 0 gives the false-alarm rate.
    """
    import random

    if len(args.a) != len(args.b):
        raise GateError("A and B runs come in pairs")
    a_runs, ctx = per_run_samples(args.a)
    b_runs, _ = per_run_samples(args.b)
    n = len(a_runs)
    k = args.pairs
    rng = random.Random(args.seed)
    slowdowns = [0.0] + [float(x) for x in args.slowdowns.split(",") if float(x) > 0]
    result: dict = {"pairs_measured": n, "pairs_per_gate": k, "trials": args.trials,
                    "alpha": args.alpha, "threshold": args.threshold,
                    "machine": f"{ctx.get('cpu_model')}, isa {ctx.get('attncheck_isa')}, "
                               f"{ctx.get('cpu_count')} cpus", "rates": {}}
    figures: list[str] = []
    for s in slowdowns:
        flagged: dict[str, int] = {}
        any_flagged = 0
        for _ in range(args.trials):
            idx = rng.sample(range(n), k) if n >= k else [rng.randrange(n) for _ in range(k)]
            a_side, b_side = [], []
            for i in idx:
                x, y = (a_runs[i], b_runs[i]) if rng.random() < 0.5 else (b_runs[i], a_runs[i])
                a_side.append(x)
                b_side.append(y)
            rows = ab_compare(a_side, b_side, args.alpha, args.threshold, 1.0 / (1.0 + s),
                              how=args.per_process)
            hit = False
            for r in rows:
                key = f"{r.benchmark} [{r.counter}]"
                if key not in figures:
                    figures.append(key)
                if r.verdict.startswith("REGRESSION"):
                    flagged[key] = flagged.get(key, 0) + 1
                    hit = True
            any_flagged += hit
        result["rates"][f"{s:g}"] = {"per_figure": {f: flagged.get(f, 0) / args.trials
                                                    for f in figures},
                                     "any_figure": any_flagged / args.trials}
    # The table: detection rate per figure and slowdown.
    cols = [f"{s:g}" for s in slowdowns]
    width = max(len(f) for f in figures)
    print(f"power of the A/B gate: {n} measured A/A pairs on {result['machine']}; "
          f"{k} pairs per simulated gate, {args.trials} trials per slowdown "
          f"(0 = false-alarm rate; s = every timed call 1+s times as long)")
    print("figure".ljust(width) + "".join(f"  s={c:>5}" for c in cols))
    for f in figures:
        print(f.ljust(width) + "".join(f"  {result['rates'][c]['per_figure'][f]:7.3f}" for c in cols))
    print("any figure".ljust(width) + "".join(f"  {result['rates'][c]['any_figure']:7.3f}" for c in cols))
    smallest = {}
    for f in figures:
        ok = [s for s in slowdowns if s > 0 and result["rates"][f"{s:g}"]["per_figure"][f] >= 0.95]
        smallest[f] = min(ok) if ok else None
    result["smallest_slowdown_at_95pct_power"] = smallest
    worst = max((v for v in smallest.values() if v is not None), default=None)
    if None in smallest.values():
        print("95% power: not reached for every figure within the slowdowns tried")
    else:
        print(f"95% power: every figure's slowdown of s >= {worst:g} is caught")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return EXIT_PASS


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="judge a run against a baseline")
    c.add_argument("--current", required=True, nargs="+",
                   help="Google Benchmark JSON of this run (several: pooled)")
    c.add_argument("--baseline", required=True, help="bench/baselines/NAME.json")
    c.add_argument("--out", help="folder for gate.md, gate.svg, gate.json")
    c.add_argument("--alpha", type=float, default=ALPHA)
    c.add_argument("--threshold", type=float, default=THRESHOLD)
    ab = sub.add_parser("ab", help="judge B against A, runs of two builds made in the same run")
    ab.add_argument("--a", required=True, nargs="+", help="A's runs, in pair order")
    ab.add_argument("--b", required=True, nargs="+", help="B's runs, in pair order")
    ab.add_argument("--a-label", default="A")
    ab.add_argument("--b-label", default="B")
    ab.add_argument("--out", help="folder for gate.md, gate.svg, gate.json")
    ab.add_argument("--alpha", type=float, default=AB_FAMILY_ALPHA,
                    help="false-alarm rate of the whole gate (split over the figures)")
    ab.add_argument("--threshold", type=float, default=AB_THRESHOLD)
    ab.add_argument("--per-process", choices=("max", "median"), default="max")
    pw = sub.add_parser("power", help="detection rate of the ab rule, from A/A runs")
    pw.add_argument("--a", required=True, nargs="+")
    pw.add_argument("--b", required=True, nargs="+")
    pw.add_argument("--pairs", type=int, default=20, help="process pairs of one gate run")
    pw.add_argument("--slowdowns", default="0.02,0.03,0.05,0.07,0.1,0.15,0.2,0.3")
    pw.add_argument("--trials", type=int, default=1000)
    pw.add_argument("--seed", type=int, default=1)
    pw.add_argument("--alpha", type=float, default=AB_FAMILY_ALPHA)
    pw.add_argument("--threshold", type=float, default=AB_THRESHOLD)
    pw.add_argument("--per-process", choices=("max", "median"), default="max")
    pw.add_argument("--out", help="JSON file for the rates")
    r = sub.add_parser("record", help="make a baseline from a run")
    r.add_argument("--current", required=True, nargs="+")
    r.add_argument("--baseline", required=True)
    args = p.parse_args(argv)
    try:
        if args.cmd == "record":
            return record(args.current, args.baseline)
        if args.cmd == "ab":
            return run_ab(args)
        if args.cmd == "power":
            return run_power(args)
        return run_compare(args)
    except GateError as e:
        print(f"perf gate: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
