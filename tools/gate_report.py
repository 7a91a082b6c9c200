"""gate_report.py — the performance gate's rows (one judged figure each) and how they are shown:
the table (stdout and Markdown), the chart (gate.svg) and the summary files (gate.md, gate.json).
Used by tools/perf_gate.py, which makes the rows and decides their verdicts."""
from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field


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


# ---------------------------------------------------------------------------------------------
# Reporting: the table (stdout and Markdown), the chart, a machine-readable summary


def fmt(v: float, spec: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def table_lines(rows: list[Row], markdown: bool,
                names: tuple[str, str] = ("baseline (median)", "now (median)")) -> list[str]:
    head = ["benchmark", "figure", names[0], names[1], "change", "p-value", "verdict"]
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


def write_chart(rows: list[Row], path: str, alpha: float, threshold: float,
                names: tuple[str, str] = ("baseline", "now"), peak_counters: dict | None = None) -> None:
    """DIR/gate.svg: the figures in peak_counters (fractions of a peak) against 1.0, and every
    judged figure now over the baseline's median."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    judged = [r for r in rows if r.base and r.now]
    frac = [r for r in judged if (peak_counters or {}).get(r.counter)]
    n = max(len(judged), 1)
    if not frac:  # A/B rates: no peak to draw against, only B against A
        fig, axes = plt.subplots(1, 1, figsize=(8, 0.5 * n + 2.4), squeeze=False)
        write_relative(axes[0][0], judged, alpha, threshold, names)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return
    fig, axes = plt.subplots(1, 2, figsize=(14, 0.5 * n + 2.4), squeeze=False)
    ax_peak, ax_rel = axes[0]

    def spread(values: list[float]) -> tuple[float, float, float]:
        q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
        return q[0], statistics.median(values), q[2]

    # Left: each fraction of peak, baseline and now (median, interquartile whiskers); 1.0 = peak.
    labels = [f"{r.benchmark}  [{r.counter}]" for r in frac]
    y = range(len(frac))
    for off, key, colour, label in ((-0.18, "base", "#9ab", names[0]), (0.18, "now", None, names[1])):
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

    write_relative(ax_rel, judged, alpha, threshold, names)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_relative(ax_rel, judged: list[Row], alpha: float, threshold: float,
                   names: tuple[str, str]) -> None:
    """Every judged figure, B (now) over A's (the baseline's) median, per sample; the band is
    the threshold."""
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
    ax_rel.set_xlabel(f"{names[1]} / {names[0]} median (dots: samples; grey: {names[0]}'s)")
    ax_rel.set_title(f"{names[1]} against {names[0]} (fail: p<{alpha} and drop >{threshold:.0%})")
    lo = min([0.5] + [v / statistics.median(r.base) for r in judged for v in r.now])
    ax_rel.set_xlim(max(0.0, lo - 0.05), 1.0 + threshold * 4)


def write_reports(out: str, md: list[str], summary: dict, rows: list[Row],
                  medians: tuple[str, str] = ("baseline_median", "now_median")) -> None:
    """DIR/gate.md (the Markdown lines) and DIR/gate.json (the summary plus one entry a row)."""
    with open(os.path.join(out, "gate.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    summary = dict(summary, rows=[{"benchmark": r.benchmark, "figure": r.counter,
                                   medians[0]: r.base_median, medians[1]: r.now_median,
                                   "change": r.change, "p_value": r.p_worse, "verdict": r.verdict}
                                  for r in rows])
    with open(os.path.join(out, "gate.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, allow_nan=True)
