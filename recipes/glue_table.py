#!/usr/bin/env python
"""Summarize recipes/table2_glue.sh runs as the paper's Table 2: one row per task, the best dev
score over epochs for each learning rate, and the best over learning rates (picked on dev).

    glue_table.py RUNS_DIR [--tasks CoLA MNLI ...]

RUNS_DIR/TASK/lrLR/train.log are fairseq-train logs (--log-format simple), and RUNS_DIR/TASK/lrLR/seedK/train.log
those of seed K > 1 (SEEDS=N): a score is then the mean ± std over the seeds, and the best learning rate
the one of the best mean. Metrics are the ones fairseq's sentence_prediction criterion logs: accuracy,
mcc (CoLA), pearson (STS-B).
"""
import argparse
import statistics
import sys
from pathlib import Path

from fairseq_normformer.analysis.report import mean_std_cell
from fairseq_normformer.analysis.training_log import read_training_log
from fairseq_normformer.runs.run_dir import seed_dirs

TASK_METRIC = {"CoLA": "mcc", "STS-B": "pearson"}  # others: accuracy


def best_dev(log: Path, metric: str):
    """The best value of ``metric`` over the log's validation lines, or None."""
    try:
        values = [float(r[metric]) for r in read_training_log(log).valid if metric in r]
    except ValueError:  # no progress lines yet
        return None
    return max(values) if values else None


def seed_scores(run: Path, metric: str):
    """The best dev score of each seed of one run (RUN/train.log, then RUN/seedK/train.log in seed
    order), or None while a seed has none."""
    logs = [seed / "train.log" for seed in seed_dirs(run)]
    scores = [best_dev(log, metric) if log.exists() else None for log in logs]
    return None if None in scores else scores


def best_lr(runs: Path, metric: str):
    """(each LR's per-seed scores, the LR of the best mean score or None) of RUNS/lrLR."""
    scores = {run.name[2:]: seed_scores(run, metric) for run in sorted(runs.glob("lr*"))}
    done = {lr: statistics.fmean(s) for lr, s in scores.items() if s is not None}
    return scores, max(done, key=done.get) if done else None


def table(runs: Path, tasks) -> str:
    lrs = sorted({p.name[2:] for t in tasks for p in (runs / t).glob("lr*")}, key=float)
    header = ["task", "metric"] + [f"lr {lr}" for lr in lrs] + ["best lr", "dev"]
    rows, best_scores = [header, ["---"] * len(header)], []
    for task in tasks:
        metric = TASK_METRIC.get(task, "accuracy")
        scores, best = best_lr(runs / task, metric)
        if best:
            best_scores.append(statistics.fmean(scores[best]))
        cells = [str(mean_std_cell(scores[lr])) if scores.get(lr) else "-" for lr in lrs]
        rows.append([task, metric] + cells + [best or "-", str(mean_std_cell(scores[best])) if best else "-"])
    if len(best_scores) == len(tasks) and len(tasks) > 1:
        rows.append(["Avg", ""] + [""] * len(lrs) + ["", f"{statistics.fmean(best_scores):.4g}"])
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
