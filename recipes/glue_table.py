#!/usr/bin/env python
"""Summarize recipes/table2_glue.sh runs as the paper's Table 2: one row per task, the best dev
score over epochs for each learning rate, and the best over learning rates (picked on dev).

    glue_table.py RUNS_DIR [--tasks CoLA MNLI ...]

RUNS_DIR/TASK/lrLR/train.log are fairseq-train logs (--log-format simple). Metrics are the ones
fairseq's sentence_prediction criterion logs: accuracy, mcc (CoLA), pearson (STS-B).
"""
import argparse
import sys
from pathlib import Path

from fairseq_normformer.analysis.training_log import read_training_log

TASK_METRIC = {"CoLA": "mcc", "STS-B": "pearson"}  # others: accuracy


def best_dev(log: Path, metric: str):
    """The best value of ``metric`` over the log's validation lines, or None."""
    try:
        values = [float(r[metric]) for r in read_training_log(log).valid if metric in r]
    except ValueError:  # no progress lines yet
        return None
    return max(values) if values else None


def table(runs: Path, tasks) -> str:
    lrs = sorted({p.name[2:] for t in tasks for p in (runs / t).glob("lr*")}, key=float)
    header = ["task", "metric"] + [f"lr {lr}" for lr in lrs] + ["best lr", "dev"]
    rows, best_scores = [header, ["---"] * len(header)], []
    for task in tasks:
        metric = TASK_METRIC.get(task, "accuracy")
        scores = {}
        for lr in lrs:
            log = runs / task / f"lr{lr}" / "train.log"
            scores[lr] = best_dev(log, metric) if log.exists() else None
        done = {lr: s for lr, s in scores.items() if s is not None}
        best_lr = max(done, key=done.get) if done else None
        if best_lr:
            best_scores.append(done[best_lr])
        cells = [f"{scores[lr]:.2f}" if scores[lr] is not None else "-" for lr in lrs]
        rows.append([task, metric] + cells + [best_lr or "-", f"{done[best_lr]:.2f}" if best_lr else "-"])
    if len(best_scores) == len(tasks) and len(tasks) > 1:
        rows.append(["Avg", ""] + [""] * len(lrs) + ["", f"{sum(best_scores) / len(best_scores):.2f}"])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--tasks", nargs="+", help="default: every task directory under RUNS")
    args = parser.parse_args(argv)
    tasks = args.tasks or sorted(p.name for p in args.runs.iterdir() if p.is_dir())
    if not tasks:
        sys.exit(f"glue_table.py: error: no runs under {args.runs}")
    print(table(args.runs, tasks))


if __name__ == "__main__":
    main()
