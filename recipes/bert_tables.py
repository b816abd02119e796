#!/usr/bin/env python
"""The tables of the BERT recipes, from their logs.

    bert_tables.py length-schedule OUT --short 128 --long 512 [--out FILE]
        recipes/bert_length_schedule.sh: OUT/{phase1,phase2}/train.log and OUT/eval/PHASE-TOKENS/valid.log
    bert_tables.py ablations OUT --rows NAME=LABEL ... [--tasks SameDoc ...] [--out FILE]
        recipes/bert_table5_ablations.sh: OUT/NAME/pretrain/train.log and the fine-tuning runs
        OUT/NAME/finetune/TASK/lrLR/train.log (glue_table.py's layout and reading); with seeds, seed K > 1
        of a row in OUT/NAME/seedK/ (mean ± std over the seeds, differences to the first row paired by seed)
"""
import argparse
import importlib.util
import statistics
from pathlib import Path

from fairseq_normformer.analysis.report import difference_column, mean_std_cell
from fairseq_normformer.analysis.training_log import read_training_log
from fairseq_normformer.runs.run_dir import seed_dirs

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


def best_over_lrs(glue_table, finetune_dirs: list, metric: str):
    """(the best LR by mean dev score over the seeds, each seed's score at it) of the seeds' fine-tuning
    runs FINETUNE_DIR/lrLR (glue_table.py's reading); (None, None) before every seed has a score."""
    per_seed = [glue_table.best_lr(runs, metric)[0] for runs in finetune_dirs]
    scores = {lr: [x for seed in per_seed for x in seed[lr]] for lr in per_seed[0]
              if all(seed.get(lr) for seed in per_seed)}  # fmt: skip
    if not scores:
        return None, None
    best = max(scores, key=lambda lr: statistics.fmean(scores[lr]))
    return best, scores[best]


def ablations(out: Path, rows: list, tasks: list) -> str:
    """One row per pre-training variant: its final pre-training validation loss (of its own objective)
    and, per task, the best dev score of fine-tuning over the learning rates, with its difference to the
    first row (95% interval, paired by seed)."""
    glue_table = load_glue_table()
    metrics = {task: glue_table.TASK_METRIC.get(task, "accuracy") for task in tasks}
    seeds = {name: seed_dirs(out / name) for name, _ in rows}
    header = ["pre-training", "params", "seeds", "updates", "valid loss"]
    columns = []
    for task, metric in metrics.items():
        best = {name: best_over_lrs(glue_table, [d / "finetune" / task for d in seeds[name]], metric) for name, _ in rows}
        done = {name: scores for name, (_, scores) in best.items() if scores}
        delta = dict(zip(done, difference_column(done))) if rows[0][0] in done else {}
        header += [f"{task} dev {metric} (best lr)", f"{task} Δ vs first row (95% CI)"]
        columns.append({name: [f"{mean_std_cell(scores)} ({lr})" if scores else "-", delta.get(name) or "-"]
                        for name, (lr, scores) in best.items()})  # fmt: skip
    table = [header]
    for name, label in rows:
        pretrain = [read_training_log(d / "pretrain" / "train.log") for d in seeds[name]]
        losses = [log.final_valid().get("loss") for log in pretrain]
        cells = [label, f"{pretrain[0].num_params:,}", len(pretrain), pretrain[0].last_update(),
                 "-" if None in losses else mean_std_cell(losses)]  # fmt: skip
        table.append(cells + [cell for column in columns for cell in column[name]])
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
