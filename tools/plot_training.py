#!/usr/bin/python3
"""The curves of `attncheck train --json FILE` as one PNG: the training loss of each run (mask
causal, mask none) and, at every evaluation, the teacher-forced answer accuracy beside the
step-by-step generation accuracy.

    python3 tools/plot_training.py train.json train.png

Debian's python3-matplotlib; no display needed (the Agg backend).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: plot_training.py TRAIN.json OUT.png\n")
        return 2
    try:
        with open(argv[1]) as f:
            report = json.load(f)
        runs = report["runs"]
    except (OSError, ValueError, KeyError) as e:
        sys.stderr.write(f"plot_training.py: {argv[1]}: not an `attncheck train --json` report ({e})\n")
        return 2
    colors = {"causal": "tab:blue", "none": "tab:red"}
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for mask, run in runs.items():
        curve = run["curve"]
        color = colors.get(mask, None)
        loss_ax.plot([p["step"] for p in curve], [p["train_loss"] for p in curve], color=color, alpha=0.8,
                     label=f"mask {mask}: training loss")
        evals = [p for p in curve if "eval" in p]
        steps = [p["step"] for p in evals]
        acc_ax.plot(steps, [p["eval"]["answer_accuracy"] for p in evals], color=color, linestyle="-",
                    marker="o", markersize=3, label=f"mask {mask}: teacher-forced answer accuracy")
        acc_ax.plot(steps, [p["eval"]["generation_token_accuracy"] for p in evals], color=color, linestyle="--",
                    marker="x", markersize=4, label=f"mask {mask}: step-by-step generation accuracy")
    task = report.get("task", {})
    loss_ax.set_title(f"task {task.get('task', '?')}, seed {report.get('seed', '?')}: training loss (every position)")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("cross-entropy (nats)")
    loss_ax.set_yscale("log")
    loss_ax.legend()
    acc_ax.set_title("answer accuracy on held-out examples")
    acc_ax.set_xlabel("step")
    acc_ax.set_ylim(-0.02, 1.02)
    acc_ax.axhline(1.0 / max(1, task.get("alphabet", 8)), color="gray", linewidth=0.8, linestyle=":",
                   label="chance")
    acc_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
