#!/usr/bin/env python
"""The tables of the BERT recipes, from their logs.

    bert_tables.py length-schedule OUT --short 128 --long 512 [--out FILE]
        recipes/bert_length_schedule.sh: OUT/{phase1,phase2}/train.log and OUT/eval/PHASE-TOKENS/valid.log
    bert_tables.py ablations OUT --rows NAME=LABEL ... [--tasks SameDoc ...] [--out FILE]
        recipes/bert_table5_ablations.sh: OUT/NAME/pretrain/train.log and the fine-tuning runs
        OUT/NAME/finetune/TASK/lrLR/train.log (glue_table.py's layout and reading)
"""
import argparse
import importlib.util
from pathlib import Path

from fairseq_normformer.analysis.training_log import read_training_log

VALID_COLUMNS = ("mlm_loss", "mlm_accuracy", "nsp_accuracy")


def markdown(rows) -> str:
    rows = [rows[0], ["---"] * len(rows[0])] + rows[1:]
    return "\n".join("| " + " | ".join(map(str, r)) + " |" for r in rows)


def length_schedule(out: Path, short: int, long: int) -> str:
    """One row per phase: updates, training time, and validation at both lengths."""
    header = ["checkpoint", "updates", "training time (s)"]
    header += [f"valid@{n} {c}" for n in (short, long) for c in VALID_COLUMNS]
    rows = [header]
    for phase, label in (("phase1", f"phase 1 ({short} tokens)"), ("phase2", f"phase 2 (+ {long} tokens)")):
        train = read_training_log(out / phase / "train.log")
        cells = [label, train.last_update(), f"{train.seconds:.0f}" if train.seconds else "-"]
        for n in (short, long):
            valid = read_training_log(out / "eval" / f"{phase}-{n}" / "valid.log").final_valid()
            cells += [valid.get(c, "-") for c in VALID_COLUMNS]
        rows.append(cells)
    return markdown(rows)


def load_glue_table():
    """recipes/glue_table.py (recipes/ is not a package): its reading of fine-tuning logs."""
    spec = importlib.util.spec_from_file_location("glue_table", Path(__file__).with_name("glue_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def best_over_lrs(glue_table, runs: Path, metric: str) -> str:
    """The best dev score over RUNS/lrLR/train.log and its LR (picked on dev, as glue_table.py)."""
    scores = {run.name[2:]: glue_table.best_dev(run / "train.log", metric) for run in sorted(runs.glob("lr*"))}
    done = {lr: s for lr, s in scores.items() if s is not None}
    best = max(done, key=done.get) if done else None
    return f"{done[best]:.2f} ({best})" if best else "-"


def ablations(out: Path, rows: list, tasks: list) -> str:
    """One row per pre-training variant: its final pre-training validation loss (of its own objective)
    and, per task, the best dev score of fine-tuning over the learning rates."""
    glue_table = load_glue_table()
    metrics = {task: glue_table.TASK_METRIC.get(task, "accuracy") for task in tasks}
    table = [["pre-training", "params", "updates", "valid loss"] + [f"{t} dev {m} (best lr)" for t, m in metrics.items()]]
    for name, label in rows:
        pretrain = read_training_log(out / name / "pretrain" / "train.log")
        cells = [label, f"{pretrain.num_params:,}", pretrain.last_update(), pretrain.final_valid().get("loss", "-")]
        table.append(cells + [best_over_lrs(glue_table, out / name / "finetune" / t, m) for t, m in metrics.items()])
    return markdown(table)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    length = commands.add_parser("length-schedule")
    length.add_argument("--short", type=int, required=True)
    length.add_argument("--long", type=int, required=True)
    abl = commands.add_parser("ablations")
    abl.add_argument("--rows", nargs="+", required=True, help="NAME=LABEL: a run directory and its row label")
    abl.add_argument("--tasks", nargs="+", default=["SameDoc"])
    for sub in (length, abl):
        sub.add_argument("out", type=Path, help="the recipe's output directory")
        sub.add_argument("--out", dest="table_file", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if args.command == "length-schedule":
        text = length_schedule(args.out, args.short, args.long)
    else:
        text = ablations(args.out, [r.split("=", 1) for r in args.rows], args.tasks)
    print(text)
    if args.table_file:
        args.table_file.write_text(text + "\n")


if __name__ == "__main__":
    main()
