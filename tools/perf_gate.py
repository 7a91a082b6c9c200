#!/usr/bin/env python3
"""perf_gate.py — the performance-regression gate: Google Benchmark JSON against a baseline.

It compares machine-independent figures only, the counters that the benchmark binary computes
against its own calibrations in the same run:

    frac_peak  useful GFLOP/s as a fraction of the FMA peak measured by the same run (1.0 = peak)
    frac_bw    bytes moved per second as a fraction of the measured DRAM bandwidth (1.0 = peak)
    speedup    optimized over reference on the same work

Raw times and GFLOP/s are not compared: they say more about the machine than about the code,
and a baseline recorded on one machine must still mean something on another.

A figure regresses only when both hold (named constants below, overridable on the command line):
  - the drop is significant: a one-sided Mann-Whitney U test over the repetitions (the test
    Google Benchmark's compare.py uses) gives p < ALPHA, so noise alone is unlikely to explain it;
  - the drop is large: the median fell by more than THRESHOLD (relative), so a significant but
    tiny change (a different CPU stepping, a compiler update) does not fail the build; and by
    more than NOISE_FACTOR times the spread of the repetitions (their coefficient of variation),
    so that a machine too busy to measure anything (a shared runner) cannot fail the build by
    itself: the verdict then says "noisy" and the threshold it needed.

Subcommands:
  compare --current RUN.json... --baseline BASE.json --out DIR   table on stdout, DIR/gate.md,
          DIR/gate.svg, DIR/gate.json; exit 0 pass, 1 regression, 2 unusable input
  record  --current RUN.json... --baseline BASE.json             writes the baseline
Several --current files (runs of separate processes) are pooled: each process measures its own
calibration once, so pooling puts the calibration's run-to-run noise into the samples that the
U test sees, instead of one lucky or unlucky calibration shifting all repetitions together.

Usage from CI: ci/perf_gate.sh (runs the benchmarks, then this script). See docs/ci.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, field

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

BASELINE_FORMAT = "attncheck-perf-baseline-1"

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
    return out


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


@dataclass
class Row:
    benchmark: str
    counter: str
    base: list[float] = field(default_factory=list)
    now: list[float] = field(default_factory=list)
    p_worse: float = float("nan")   # one-sided: now is stochastically smaller than base
    p_better: float = float("nan")  # one-sided: now is stochastically larger than base
    verdict: str = ""

    @property
    def base_median(self) -> float:
        return statistics.median(self.base) if self.base else float("nan")

    @property
    def now_median(self) -> float:
        return statistics.median(self.now) if self.now else float("nan")

    @property
    def change(self) -> float:
        """Relative change of the median, now over baseline minus one (-0.25: 25% worse)."""
        if not self.base or not self.now or self.base_median == 0:
            return float("nan")
        return self.now_median / self.base_median - 1.0

    @property
    def failed(self) -> bool:
        return self.verdict.startswith("REGRESSION") or self.verdict.startswith("MISSING")


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


# ---------------------------------------------------------------------------------------------
# Reporting: the table (stdout and Markdown), the chart, a machine-readable summary


def fmt(v: float, spec: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def table_lines(rows: list[Row], markdown: bool) -> list[str]:
    head = ["benchmark", "figure", "baseline (median)", "now (median)", "change", "p-value",
            "verdict"]
    body = [[r.benchmark, r.counter, fmt(r.base_median), fmt(r.now_median),
             fmt(r.change * 100, "+.1f") + "%" if not math.isnan(r.change) else "-",
             fmt(r.p_worse, ".2g"), r.verdict] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c if i != 6 or not r.failed else f"**{c}**"
                                    for i, c in enumerate(cells)) + " |"
                  for r, cells in zip(rows, body)]
        return lines
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return [line(head), line(["-" * w for w in widths])] + [line(c) for c in body]


def context_lines(base: dict, now_samples: dict) -> list[str]:
    """The calibrations of both runs (machine-dependent, for the reader only)."""
    out = []
    for name in sorted(now_samples):
        for c in ("gflops", "gbs"):
            if name.startswith(("BM_FmaPeak", "BM_DramRead")) and c in now_samples[name]:
                b = base.get("benchmarks", {}).get(name, {}).get(c)
                out.append(f"- {name} {c}: now {fmt(statistics.median(now_samples[name][c]), '.1f')}"
                           + (f", baseline {fmt(statistics.median(b), '.1f')}" if b else ""))
    return out


def write_chart(rows: list[Row], path: str, alpha: float, threshold: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    judged = [r for r in rows if r.base and r.now]
    frac = [r for r in judged if GATED_COUNTERS[r.counter]]
    n = max(len(judged), 1)
    fig, axes = plt.subplots(1, 2, figsize=(14, 0.5 * n + 2.4), squeeze=False)
    ax_peak, ax_rel = axes[0]

    def spread(values: list[float]) -> tuple[float, float, float]:
        q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
        return q[0], statistics.median(values), q[2]

    # Left: each fraction of peak, baseline and now (median, interquartile whiskers); 1.0 = peak.
    labels = [f"{r.benchmark}  [{r.counter}]" for r in frac]
    y = range(len(frac))
    for off, key, colour, label in ((-0.18, "base", "#9ab", "baseline"), (0.18, "now", None, "now")):
        for i, r in enumerate(frac):
            lo, med, hi = spread(getattr(r, key))
            c = colour or ("#c33" if r.failed else "#27a")
            ax_peak.barh(i + off, med, height=0.34, color=c, label=label if i == 0 else None)
            ax_peak.errorbar(med, i + off, xerr=[[med - lo], [hi - med]], fmt="none", ecolor="k",
                             capsize=2, lw=0.8)
    ax_peak.axvline(1.0, color="k", ls="--", lw=1)
    ax_peak.text(1.0, 1.0, "peak", ha="center", va="bottom", fontsize=8,
                 transform=ax_peak.get_xaxis_transform())
    ax_peak.set_yticks(list(y), labels, fontsize=8)
    ax_peak.invert_yaxis()
    ax_peak.set_xlim(0, 1.1)
    ax_peak.set_xlabel("fraction of this machine's measured peak (1.0 = peak)")
    ax_peak.set_title("Against the machine's peak")
    if frac:
        ax_peak.legend(loc="lower right", fontsize=8)

    # Right: every gated figure now over baseline, per repetition; the band is the threshold.
    labels = [f"{r.benchmark}  [{r.counter}]" for r in judged]
    ax_rel.axvspan(1.0 - threshold, 1.0 + threshold, color="#eee", label=f"±{threshold:.0%}")
    ax_rel.axvline(1.0, color="k", lw=1)
    for i, r in enumerate(judged):
        mb = statistics.median(r.base)
        c = "#c33" if r.failed else ("#2a2" if r.verdict == "improved" else "#27a")
        ax_rel.scatter([v / mb for v in r.now], [i] * len(r.now), s=10, color=c, alpha=0.6)
        ax_rel.scatter([v / mb for v in r.base], [i + 0.25] * len(r.base), s=6, color="#9ab")
        ax_rel.text(1.0 + threshold * 1.2, i, f"p={fmt(r.p_worse, '.2g')}\n{r.verdict}",
                    va="center", fontsize=7, color=c)
    ax_rel.set_yticks(list(range(len(judged))), labels, fontsize=8)
    ax_rel.invert_yaxis()
    ax_rel.set_xlabel("now / baseline median (dots: repetitions; grey: the baseline's)")
    ax_rel.set_title(f"Against the baseline (fail: p<{alpha} and drop >{threshold:.0%})")
    lo = min([0.5] + [v / statistics.median(r.base) for r in judged for v in r.now])
    ax_rel.set_xlim(max(0.0, lo - 0.05), 1.0 + threshold * 4)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_compare(args: argparse.Namespace) -> int:
    base = load_baseline(args.baseline)
    now_samples, _ = samples_from_runs(args.current)
    current = " + ".join(args.current)
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
        write_chart(rows, chart, args.alpha, args.threshold)
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
        with open(os.path.join(args.out, "gate.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(md) + "\n")
        with open(os.path.join(args.out, "gate.json"), "w", encoding="utf-8") as f:
            json.dump({"verdict": verdict, "alpha": args.alpha, "threshold": args.threshold,
                       "rows": [{"benchmark": r.benchmark, "figure": r.counter,
                                 "baseline_median": r.base_median, "now_median": r.now_median,
                                 "change": r.change, "p_value": r.p_worse, "verdict": r.verdict}
                                for r in rows]}, f, indent=1, allow_nan=True)
        print(f"perf gate: wrote {chart} and {os.path.join(args.out, 'gate.md')}")
    return EXIT_REGRESSION if failed else EXIT_PASS


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
    r = sub.add_parser("record", help="make a baseline from a run")
    r.add_argument("--current", required=True, nargs="+")
    r.add_argument("--baseline", required=True)
    args = p.parse_args(argv)
    try:
        if args.cmd == "record":
            return record(args.current, args.baseline)
        return run_compare(args)
    except GateError as e:
        print(f"perf gate: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
