"""normformer-analyze: the paper's measurements from training outputs (docs/analysis.md).

    normformer-analyze grad-curves    --run Baseline=base.jsonl --run NormFormer=nf.jsonl --out-dir DIR   # Fig. 3
    normformer-analyze grad-ratio     --baseline Baseline=base.jsonl --run NormFormer=nf.jsonl \
                                      --window 1:100 --out-dir DIR                                         # Fig. 5
    normformer-analyze gamma          checkpoint_last.pt --out-dir DIR                                     # Fig. 4
    normformer-analyze diagnostics    --run Pre-LN=a.jsonl --run QK-norm=b.jsonl --out-dir DIR  # --diagnostics-file
    normformer-analyze time-to-target --baseline base.log --candidate nf.log --out-dir DIR                 # Fig. 2
    normformer-analyze lr-stability   DATA --peak-lr 0.1 --warmup-updates 1000 --out-dir DIR -- --arch ...  # Table 3
    normformer-analyze lr-table       --run Baseline=DIR --run NormFormer=DIR --out table3.md
    normformer-analyze ppl-table      --run Baseline=base.log --run NormFormer=nf.log --out table.md        # Tables 5-7
    normformer-analyze lr-grid        --run 1e-3=a.log --run 3e-3=b.log --out grid.md  # prints: 3e-3 highest
    normformer-analyze outcome        train.log                     # prints: finished, diverged or unfinished
    normformer-analyze eval-table     --run Baseline=DIR --run NormFormer=DIR --out table8.md               # Table 8
    normformer-analyze metric-table   --run A=a.log --run B=b.log --metric accuracy --out table.md         # any task
    normformer-analyze mlm-curves     --run Pre-LN=a.log --run NormFormer=b.log --data DATA --out-dir DIR  # masked LMs
    normformer-analyze sweep          work/recipes/norm_bench-small     # every table of a normformer-sweep directory
    normformer-analyze lr-sensitivity work/recipes/lr_sensitivity-small  # Wortsman et al.'s, per scheme and width
    normformer-analyze init-grads     DATA --out post_ln.json -- --task translation --arch ...            # Xiong Fig. 3
    normformer-analyze init-grads-plot --run Post-LN=post_ln.json --run Pre-LN=pre_ln.json --out-dir DIR
    normformer-analyze bleu-table     --run Post-LN=RUN_DIR --run Pre-LN=RUN_DIR --out-dir DIR            # Xiong Fig. 2

Seeds: a label given again (--run Baseline=b/train.log --run Baseline=b/seed2/train.log ...; time-to-target:
--baseline/--candidate once per seed) is the same model's next seed; tables report mean ± std over the seeds
and 95% intervals of differences to the first row, paired by seed (analysis/seeds.py, docs/analysis.md).
--seeds N gives them all at once: each --run (--baseline, --candidate) path is seed 1's, and seed K's is the
same file in RUN_DIR/seedK (the recipes' seed directories; --run Baseline=b/train.log --seeds 3 reads
b/train.log, b/seed2/train.log and b/seed3/train.log; a run directory, as lr-table's, is RUN_DIR itself).
"""
import argparse
import json
import logging
import sys
from pathlib import Path

# One of fairseq's modules calls logging.basicConfig(level=DEBUG) on import: reset it as fairseq_cli does.
logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO, force=True)

from fairseq_normformer.analysis.diagnostics import OUTPUT, final_values, read_diagnostics  # noqa: E402
from fairseq_normformer.analysis.gamma import added_gammas, load_model_state, summary_rows  # noqa: E402
from fairseq_normformer.analysis.grad_curves import grad_ratios, layer_means, read_grad_norms  # noqa: E402
from fairseq_normformer.runs.lr_stability import read_result, run_lr_stability  # noqa: E402
from fairseq_normformer.runs.run_dir import seed_paths  # noqa: E402
from fairseq_normformer.instrumentation.diagnostics import ABS_LOG_Z, ATTN_LOGIT, LAYER_RMS  # noqa: E402
from fairseq_normformer.instrumentation.init_grads import build_at_init, init_grad_norms  # noqa: E402
from fairseq_normformer.analysis.plots import (  # noqa: E402
    plot_diagnostics,
    plot_gammas,
    plot_grad_norms,
    plot_init_grads,
    plot_lr_sensitivity,
    plot_lr_sensitivity_diagnostics,
    plot_mlm_curves,
    plot_grad_ratios,
    plot_time_to_target,
    plot_valid_curves,
)
from fairseq_normformer.analysis.report import (  # noqa: E402
    EVAL_HEADERS,
    LR_HEADERS,
    best_in_grid,
    difference_column,
    eval_rows,
    grid_outcome,
    interval_cell,
    layer_share_table,
    lr_grid_headers,
    lr_grid_rows,
    lr_rows,
    markdown_table,
    mean_std_cell,
    per_seed_cell,
    ppl_headers,
    ppl_rows,
    valid_table,
)
from fairseq_normformer.analysis.lr_sensitivity import read_study, write_reports  # noqa: E402
from fairseq_normformer.analysis.sweep_tables import SweepTables  # noqa: E402
from fairseq_normformer.analysis.time_to_target import fraction_summary  # noqa: E402
from fairseq_normformer.analysis.time_to_target import time_to_target as compute_time_to_target  # noqa: E402
from fairseq_normformer.analysis.training_log import read_generate_bleu, read_training_log  # noqa: E402
from fairseq_normformer.analysis.unigram import unigram_baseline  # noqa: E402


TAKES_TRAIN_ARGS = ("lr-stability", "init-grads")


def labelled(text: str):
    """LABEL=PATH."""
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=PATH, got {text!r}")
    return label, path


def lr_labelled(text: str):
    """LR=PATH, the LR a number."""
    lr, path = labelled(text)
    try:
        float(lr)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LR=PATH with LR a number, got {text!r}") from None
    return lr, path


def by_label(runs) -> dict:
    """{label: [path of each seed]}: a label given again (--run LABEL=PATH) is the same model's next seed."""
    grouped = {}
    for label, path in runs:
        grouped.setdefault(label, []).append(path)
    return grouped


def with_seeds(args):
    """``args`` with each --run, --baseline and --candidate path standing for --seeds N seeds, in seed order
    (runs/run_dir.py's seed_paths): a label's seeds, then the next label's."""

    def each_seed(run) -> list:
        label, path = run if isinstance(run, tuple) else (None, run)
        paths = [str(p) for p in seed_paths(path, args.seeds, args.run_dirs)]
        return paths if label is None else [(label, p) for p in paths]

    if getattr(args, "seeds", None) is not None:
        for name in ("run", "baseline", "candidate"):
            if getattr(args, name, None):
                setattr(args, name, [seed for run in getattr(args, name) for seed in each_seed(run)])
    return args


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """The command line, --seeds expanded (with_seeds)."""
    args = parser.parse_args(argv)
    if getattr(args, "seeds", None) is not None and args.seeds < 1:
        parser.error(f"--seeds: expected a positive number of seeds, got {args.seeds}")
    return with_seeds(args)


def update_window(text: str):
    start, sep, end = text.partition(":")
    try:
        window = (int(start), int(end))
    except ValueError:
        window = None
    if not sep or window is None or window[0] > window[1]:
        raise argparse.ArgumentTypeError(f"expected START:END (updates, START <= END), got {text!r}")
    return window


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def grad_curves(args):
    start, end = args.updates or (0, float("inf"))
    records = {label: [read_grad_norms(path) for path in paths] for label, paths in by_label(args.run).items()}
    runs = {label: [[r for r in seed if start <= r["update"] <= end] for seed in seeds] for label, seeds in records.items()}
    layers = None if args.layers is None else {int(x) for x in args.layers.split(",")}
    print(plot_grad_norms(runs, Path(args.out_dir) / "fig3_grad_norms.png", args.param, layers))
    start, end = args.table_window or (start, end)
    means = {label: [layer_means(seed, args.param, start, end) for seed in seeds] for label, seeds in records.items()}
    span = "all updates" if end == float("inf") else f"updates {start}-{end}"
    title = f"Mean |grad| of {args.param} by layer over {span}\n\n"
    print(_write(Path(args.out_dir) / "fig3_grad_norms.md", title + layer_share_table(means)))


def grad_ratio(args):
    if len(args.baseline) != len(args.run):
        raise ValueError(f"runs are paired by seed: {len(args.baseline)} --baseline and {len(args.run)} --run files")
    per_seed = []
    for (_, base_path), (_, path) in zip(args.baseline, args.run):
        ratios = grad_ratios(read_grad_norms(path), read_grad_norms(base_path), *args.window)
        per_seed.append({local: by_layer for local, by_layer in ratios.items() if local.endswith(args.tensor)})
    if not per_seed[0]:
        raise ValueError(f"no parameter ending in {args.tensor!r} is in both runs' layers")
    (base_label, _), (label, _), seeds = args.baseline[0], args.run[0], len(per_seed)
    title = f"{label} / {base_label}, mean |grad| over updates {args.window[0]}-{args.window[1]}"
    title += f", mean ± std over {seeds} seeds" if seeds > 1 else ""
    out = Path(args.out_dir)
    print(plot_grad_ratios(per_seed, out / "fig5_grad_ratio.png", title))
    layers = sorted({layer for by_layer in per_seed[0].values() for layer in by_layer})
    rows = []
    for local in per_seed[0]:
        by_layer = [[seed.get(local, {}).get(layer) for seed in per_seed] for layer in layers]
        rows.append([local] + [None if None in values else mean_std_cell(values) for values in by_layer])
    table = markdown_table(["Parameter"] + [f"layer {layer}" for layer in layers], rows)
    print(_write(out / "fig5_grad_ratio.md", f"{title}\n\n{table}"))


def diagnostics(args):
    runs = {label: [read_diagnostics(path) for path in paths] for label, paths in by_label(args.run).items()}
    out = Path(args.out_dir)
    print(plot_diagnostics(runs, out / "diagnostics.png"))
    rows = []
    for label, seeds in runs.items():
        update, final = final_values(seeds)
        for layer, logits in final[ATTN_LOGIT].items():
            rows.append([label, update, layer, mean_std_cell(logits), mean_std_cell(final[LAYER_RMS][layer]), None])
        rows.append([label, update, OUTPUT, None, None, mean_std_cell(final[ABS_LOG_Z][OUTPUT])])
    headers = ["Run", "Update", "Layer", "Largest attention logit", "Output RMS", r"Mean \|log Z\|"]  # GFM: \| in a cell
    title = "Scale diagnostics at the last update every seed recorded"
    print(_write(out / "diagnostics.md", f"{title}\n\n{markdown_table(headers, rows)}"))


def gamma(args):
    gammas = added_gammas(load_model_state(args.checkpoint))
    out = Path(args.out_dir)
    print(plot_gammas(gammas, out / "fig4_gamma.png", args.title))
    table = markdown_table(["Operation", "Layer", "n", "Mean γ", "Std", "Min", "Max"], summary_rows(gammas))
    print(_write(out / "fig4_gamma.md", f"Learned γ of {args.checkpoint}\n\n{table}"))


def fraction_line(fractions: dict, labels) -> str:
    """The fraction of updates over the seeds (time_to_target.fraction_summary) in words."""
    per_seed = fractions["per_seed"]
    if None in per_seed:
        missed = ", ".join(str(k) for k, f in enumerate(per_seed, 1) if f is None)
        return f"{labels[1]} does not reach {labels[0]}'s final perplexity with seed {missed}: no fraction over seeds"
    return (f"Fraction of updates over {len(per_seed)} seeds: {mean_std_cell(per_seed)} (mean ± std), "
            f"95% CI {interval_cell(per_seed, null=1.0)}; the validations bound each crossing, so the mean "
            f"fraction lies in ({fractions['previous_mean']:.4g}, {fractions['mean']:.4g}]")  # fmt: skip


def time_to_target(args):
    if len(args.baseline) != len(args.candidate):
        raise ValueError(f"runs are paired by seed: {len(args.baseline)} --baseline and {len(args.candidate)} --candidate logs")
    baselines = [read_training_log(path) for path in args.baseline]
    candidates = [read_training_log(path) for path in args.candidate]
    results = [compute_time_to_target(b, c, args.metric) for b, c in zip(baselines, candidates)]
    labels, out = tuple(args.labels.split(",")), Path(args.out_dir)
    print(plot_time_to_target(baselines, candidates, results, out / "fig2_time_to_target.png", labels, args.metric))
    fractions = fraction_summary(results)
    record = {"seeds": [r.as_dict() for r in results], "update_fraction": fractions}
    _write(out / "fig2_time_to_target.json", json.dumps(record, indent=2) + "\n")
    headers = ["Seed", f"{labels[0]} final valid PPL", f"{labels[0]} updates", f"{labels[1]} reaches it at update",
               "Its validation before", "Fraction of updates", "Fraction of wall time"]  # fmt: skip
    rows = [[k, r.target_ppl, r.baseline_updates, r.hit_update, r.previous_update, r.update_fraction, r.wall_fraction]
            for k, r in enumerate(results, 1)]  # fmt: skip
    print(_write(out / "fig2_time_to_target.md", f"{markdown_table(headers, rows)}\n{fraction_line(fractions, labels)}\n"))


def mlm_curves(args):
    runs = {label: [read_training_log(path) for path in paths] for label, paths in by_label(args.run).items()}
    unigram, out = unigram_baseline(args.data), Path(args.out_dir)
    print(plot_mlm_curves(runs, out / "mlm_curves.png", unigram))
    rows = []
    for label, logs in runs.items():
        accuracy = [log.final_metric("mlm_accuracy") for log in logs]
        rows.append([label, len(logs), per_seed_cell([log.final_valid()["num_updates"] for log in logs]),
                     mean_std_cell(accuracy), mean_std_cell([a / unigram["accuracy"] for a in accuracy]),
                     mean_std_cell([log.final_metric("mlm_ppl") for log in logs])])  # fmt: skip
    rows.append(["unigram baseline", "", "", unigram["accuracy"], 1.0, unigram["perplexity"]])
    headers = ["Model", "Seeds", "Updates", "Valid MLM accuracy (%)", "× unigram accuracy", "Valid MLM ppl"]
    note = (f"Unigram baseline: always predict {unigram['piece']!r}, the most frequent training piece, on the "
            f"{unigram['tokens']:,} validation pieces; its perplexity is under the training frequencies (add-one).")
    print(_write(out / "mlm_curves.md", f"{markdown_table(headers, rows)}\n\n{note}\n"))


def lr_stability(args):
    result = run_lr_stability(
        args.data, args.out_dir, args.peak_lr, args.warmup_updates, args.train_args, args.threshold
    )
    if result is not None:  # None: DRY_RUN=1 printed the command
        print(result.describe())


def lr_table(args):
    results = {label: [read_result(path) for path in paths] for label, paths in by_label(args.run).items()}
    print(_write(Path(args.out), markdown_table(LR_HEADERS, lr_rows(results))))


def ppl_table(args):
    runs = {label: [read_training_log(path) for path in paths] for label, paths in by_label(args.run).items()}
    if args.compare_to is not None and args.compare_to not in runs:
        raise ValueError(f"--compare-to {args.compare_to!r} is not the label of a --run (labels: {', '.join(runs)})")
    table = markdown_table(ppl_headers(args.compare_to), ppl_rows(runs, args.compare_to))
    text = (f"{args.title}\n\n" if args.title else "") + table
    print(_write(Path(args.out), text))
    if args.plot:
        print(plot_valid_curves(runs, Path(args.plot), "ppl", "validation perplexity"))


def lr_grid(args):
    """One model's LR grid as a table; prints the best LR and where it lies (lowest, highest, inside): a
    recipe extends the grid until the best is inside."""
    logs = {lr: read_training_log(path) for lr, path in args.run}
    best, position = best_in_grid(logs, args.metric)
    table = markdown_table(lr_grid_headers(args.metric), lr_grid_rows(logs, args.metric))
    text = (f"{args.title}\n\n" if args.title else "") + table
    _write(Path(args.out), f"{text}\nBest: {best} ({position} of the grid)\n")
    print(best, position)


def outcome(args):
    """How one run ended, as lr-grid reports it: a recipe marks a diverged run so that it is not trained again."""
    print(grid_outcome(read_training_log(args.log)))


def metric_table(args):
    runs = {label: [read_training_log(path) for path in paths] for label, paths in by_label(args.run).items()}
    text = (f"{args.title}\n\n" if args.title else "") + valid_table(runs, args.metric)
    print(_write(Path(args.out), text))


def eval_table(args):
    text = (f"{args.title}\n\n" if args.title else "") + markdown_table(EVAL_HEADERS, eval_rows(by_label(args.run)))
    print(_write(Path(args.out), text))


def sweep(args):
    """Every table of a sweep directory, through the subcommands above (analysis/sweep_tables.py); the
    diverged schemes named at the end of schemes.md."""
    tables = SweepTables(Path(args.dir))
    parser = build_parser()
    for argv in tables.commands():
        command = parse(parser, argv)
        command.func(command)
    if tables.diverged:
        with open(Path(args.dir) / "schemes.md", "a", encoding="utf-8") as schemes:
            schemes.write(tables.diverged_note())
        print(tables.diverged_note())


def lr_sensitivity(args):
    """Wortsman et al. 2023's LR sensitivity of each scheme at each width of a sweep (analysis/lr_sensitivity.py)."""
    out = Path(args.out_dir or args.dir)
    out.mkdir(parents=True, exist_ok=True)
    study = read_study(Path(args.dir), args.sizes)
    figures = [plot_lr_sensitivity(study, out / "lr_sensitivity.png"),
               plot_lr_sensitivity_diagnostics(study, out / "lr_sensitivity_diagnostics.png")]  # fmt: skip
    for path in [*write_reports(study, out), *figures]:
        print(path)


def init_grads(args):
    model, criterion, sample = build_at_init([args.data, *args.train_args], args.subset)
    norms = init_grad_norms(model, criterion, sample, args.param)
    record = {"param": args.param, "train_args": args.train_args, "grad_norm": norms}
    print(_write(Path(args.out), json.dumps(record, indent=2) + "\n"))
    for stack, by_layer in norms.items():
        print(f"{stack}: " + "  ".join(f"layer {layer}: {norm:.4g}" for layer, norm in by_layer.items()))


def read_init_grads(path) -> tuple:
    """(parameter, {stack: {layer: norm}}) of an ``init-grads`` output."""
    record = json.loads(Path(path).read_text())
    norms = {stack: {int(layer): v for layer, v in by_layer.items()} for stack, by_layer in record["grad_norm"].items()}
    return record["param"], norms


def init_grads_plot(args):
    read = {label: read_init_grads(path) for label, path in args.run}
    params, runs = {param for param, _ in read.values()}, {label: norms for label, (_, norms) in read.items()}
    if len(params) > 1:
        raise ValueError(f"the runs measured different parameters ({', '.join(sorted(params))})")
    param, out = params.pop(), Path(args.out_dir)
    print(plot_init_grads(runs, out / "init_grads.png", param))
    layers = sorted({k for by_stack in runs.values() for by_layer in by_stack.values() for k in by_layer})
    rows = [[label, stack] + [by_layer.get(k) for k in layers]
            for label, by_stack in runs.items() for stack, by_layer in by_stack.items()]  # fmt: skip
    title = f"||grad {param}|| per layer at initialization (one batch)"
    table = markdown_table(["Run", "Stack"] + [f"layer {k + 1}" for k in layers], rows)
    print(_write(out / "init_grads.md", f"{title}\n\n{table}"))


def validation_bleu(log) -> list:
    valid = [r for r in log.valid if "bleu" in r]
    if not valid:
        raise ValueError(f"{log.path} has no validation BLEU (train with --eval-bleu)")
    return valid


def bleu_table(args):
    run_dirs = {label: [Path(d) for d in dirs] for label, dirs in by_label(args.run).items()}
    runs = {label: [read_training_log(d / "train.log") for d in dirs] for label, dirs in run_dirs.items()}
    valid = {label: [validation_bleu(log) for log in logs] for label, logs in runs.items()}
    out = Path(args.out_dir)
    print(plot_valid_curves(runs, out / "bleu.png", "bleu", "validation BLEU (sacrebleu)"))
    generated = {label: [read_generate_bleu(d / "generate_test.log") for d in dirs] for label, dirs in run_dirs.items()}
    test = {label: [g["bleu"] for g in gens] for label, gens in generated.items()}
    translated = {label: [g["sentences"] for g in gens] for label, gens in generated.items()}
    rows = []
    for (label, seeds), delta in zip(valid.items(), difference_column(test)):
        first, last = [v[0]["bleu"] for v in seeds], [v[-1]["bleu"] for v in seeds]
        best = [max(r["bleu"] for r in v) for v in seeds]
        rows.append([label, len(seeds), per_seed_cell([v[-1]["num_updates"] for v in seeds]),
                     *map(mean_std_cell, (first, last, best, test[label])), delta,
                     per_seed_cell(translated[label])])  # fmt: skip
    headers = ["Run", "Seeds", "Updates", "Valid BLEU, first validation", "Valid BLEU, last", "Best valid BLEU",
               "Test BLEU (best checkpoint)", "Δ test BLEU vs first row (95% CI)",
               "Test sentences translated"]  # fmt: skip
    print(_write(out / "bleu.md", markdown_table(headers, rows)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="normformer-analyze", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    seeds = argparse.ArgumentParser(add_help=False)  # the subcommands whose runs may have several seeds
    seeds.add_argument("--seeds", type=int, metavar="N",
                       help="each --run path is seed 1's of N seeds, seed K's the same file in its run directory's "
                            "seedK/ (recipes' SEEDS=N; default: one path per seed, a label given again)")  # fmt: skip
    seeds.set_defaults(run_dirs=False)  # the paths are files of a run directory (lr-table, eval-table, bleu-table: it)

    p = commands.add_parser("grad-curves", parents=[seeds], help="Fig. 3: one parameter's mean |grad| per layer against updates")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=grad-norm file (repeat; a label again: its next seed)")  # fmt: skip
    p.add_argument("--param", default="fc2.weight", help="parameter inside each layer (default: fc2.weight)")
    p.add_argument("--layers", help="comma-separated layers to plot (default: all)")
    p.add_argument("--updates", type=update_window, help="START:END updates to plot (default: all)")
    p.add_argument("--table-window", type=update_window,
                   help="START:END updates averaged in fig3_grad_norms.md: each layer's mean |grad| and layer 0's "
                        "over the mean of the others, with its 95%% interval to the first run (default: --updates)")
    p.add_argument("--out-dir", required=True, help="where fig3_grad_norms.png and fig3_grad_norms.md go")
    p.set_defaults(func=grad_curves)

    p = commands.add_parser("grad-ratio", parents=[seeds], help="Fig. 5: run/baseline mean |grad| per parameter and layer")
    p.add_argument("--baseline", type=labelled, action="append", required=True,
                   help="LABEL=grad-norm file (repeat: one per seed)")  # fmt: skip
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=grad-norm file, paired with --baseline by position")  # fmt: skip
    p.add_argument("--window", type=update_window, required=True, help="START:END updates to average over")
    p.add_argument("--tensor", default="weight", help="only parameters whose name ends so (default: weight)")
    p.add_argument("--out-dir", required=True, help="where fig5_grad_ratio.png and .md go")
    p.set_defaults(func=grad_ratio)

    p = commands.add_parser("diagnostics", parents=[seeds], help="the largest attention logit and output RMS per layer and "
                            "the output logits' mean |log Z| against updates (--diagnostics-file)")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=diagnostics file (repeat; a label again: its next seed)")  # fmt: skip
    p.add_argument("--out-dir", required=True, help="where diagnostics.png and diagnostics.md go")
    p.set_defaults(func=diagnostics)

    p = commands.add_parser("gamma", help="Fig. 4: the added operations' learned γ per layer")
    p.add_argument("checkpoint", help="a NormFormer checkpoint (.pt)")
    p.add_argument("--title", help="the figure's title (default: none)")
    p.add_argument("--out-dir", required=True, help="where fig4_gamma.png and .md go")
    p.set_defaults(func=gamma)

    p = commands.add_parser("time-to-target", parents=[seeds], help="Fig. 2: when a run reaches the baseline's final perplexity")
    p.add_argument("--baseline", action="append", required=True,
                   help="fairseq-train log of the baseline (repeat: one per seed)")  # fmt: skip
    p.add_argument("--candidate", action="append", required=True,
                   help="fairseq-train log of the other run (NormFormer), paired with --baseline by position")  # fmt: skip
    p.add_argument("--labels", default="Baseline,NormFormer", help="BASELINE,CANDIDATE names in the figure and table")
    p.add_argument("--metric", default="ppl", help="the validation perplexity compared (masked LMs: mlm_ppl)")
    p.add_argument("--out-dir", required=True, help="where fig2_time_to_target.png, .json and .md go")
    p.set_defaults(func=time_to_target)

    p = commands.add_parser("mlm-curves", parents=[seeds],
                            help="masked LM: validation accuracy and ppl against updates, and the unigram baseline")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=fairseq-train log of --criterion mlm_nsp (a label again: its next seed)")  # fmt: skip
    p.add_argument("--data", required=True, help="the data-bin the runs trained on (the unigram baseline: train -> valid)")
    p.add_argument("--out-dir", required=True, help="where mlm_curves.png and .md go")
    p.set_defaults(func=mlm_curves)

    p = commands.add_parser(
        "lr-stability",
        help="Table 3: one warmup-to-divergence run of fairseq-train; its model and batch arguments follow '--'",
    )
    p.add_argument("data", help="fairseq-preprocess output directory")
    p.add_argument("--peak-lr", type=float, required=True, help="the learning rate the warmup ends at")
    p.add_argument("--warmup-updates", type=int, required=True, help="linear warmup length = run length")
    p.add_argument("--threshold", type=float, default=65504.0, help="overflow threshold (fp16 maximum)")
    p.add_argument("--out-dir", required=True, help="where train.log and result.json go (not a directory that holds a run)")
    p.set_defaults(func=lr_stability)

    p = commands.add_parser("lr-table", parents=[seeds], help="Table 3 from lr-stability output directories")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=lr-stability --out-dir (a label again: its next seed)")  # fmt: skip
    p.add_argument("--out", required=True, help="markdown file to write")
    p.set_defaults(func=lr_table, run_dirs=True)

    p = commands.add_parser("ppl-table", parents=[seeds], help="Tables 5-7: final validation perplexity of each run")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=fairseq-train log (a label again: its next seed)")  # fmt: skip
    p.add_argument("--title", help="a line above the table (default: none)")
    p.add_argument("--compare-to", metavar="LABEL",
                   help="also each row's difference to this run's (95%% CI, paired by seed): Table 5's to NormFormer")
    p.add_argument("--out", required=True, help="markdown file to write")
    p.add_argument("--plot", help="also a PNG of each row's validation perplexity against updates (mean ± std over seeds)")
    p.set_defaults(func=ppl_table)

    p = commands.add_parser("lr-grid", help="one model's final validation perplexity by LR; prints the best LR and "
                            "whether it is the lowest, the highest or inside the grid")
    p.add_argument("--run", type=lr_labelled, action="append", required=True, help="LR=fairseq-train log (repeat)")
    p.add_argument("--metric", default="ppl", help="the validation metric compared, lower is better (masked LMs: mlm_ppl)")
    p.add_argument("--title", help="a line above the table (default: none)")
    p.add_argument("--out", required=True, help="markdown file to write")
    p.set_defaults(func=lr_grid)

    p = commands.add_parser("outcome", help="how one fairseq-train run ended: finished, diverged (the numerical "
                            "failure fairseq stopped on) or unfinished")
    p.add_argument("log", help="fairseq-train log")
    p.set_defaults(func=outcome)

    p = commands.add_parser("metric-table", parents=[seeds], help="the last validation's metrics of each run (any task)")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=fairseq-train log (a label again: its next seed)")  # fmt: skip
    p.add_argument("--metric", action="append", required=True, help="a validation metric, e.g. accuracy (repeat)")
    p.add_argument("--title", help="a line above the table (default: none)")
    p.add_argument("--out", required=True, help="markdown file to write")
    p.set_defaults(func=metric_table)

    p = commands.add_parser("eval-table", parents=[seeds], help="Table 8: fairseq-eval-lm perplexity on valid and test")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=directory with train.log, eval_valid.log, eval_test.log (again: its next seed)")  # fmt: skip
    p.add_argument("--title", help="a line above the table (default: none)")
    p.add_argument("--out", required=True, help="markdown file to write")
    p.set_defaults(func=eval_table, run_dirs=True)

    p = commands.add_parser("sweep", help="every table of a normformer-sweep directory: each scheme's LR grid, the "
                            "schemes at their best LR against the baseline (paired by seed), time to target, the spec's tables")
    p.add_argument("dir", help="the sweep's directory (normformer-sweep --out), which holds sweep.json")
    p.set_defaults(func=sweep)

    p = commands.add_parser("lr-sensitivity", help="Wortsman et al. 2023's LR sensitivity of each scheme at each width "
                            "of a sweep (a spec with `each_size`), the best loss, the largest stable LR and the "
                            "diagnostics there, and their trend across widths")
    p.add_argument("dir", help="the sweep's directory (normformer-sweep --out): its sweep.json, or each SIZE/sweep.json")
    p.add_argument("--out-dir", help="where lr_sensitivity.md, lr_sensitivity_trend.md, .json and the figures go (default: DIR)")
    p.add_argument("--size", action="append", dest="sizes", metavar="SIZE",
                   help="only this width (a SIZE/ of DIR; repeat), e.g. the finished ones of a study still running")
    p.set_defaults(func=lr_sensitivity)

    p = commands.add_parser(
        "init-grads",
        help="Xiong et al. Fig. 3: ||grad|| of fc2 per layer at init, one batch; fairseq-train arguments follow '--'",
    )
    p.add_argument("data", help="fairseq-preprocess output directory")
    p.add_argument("--subset", default="train", help="the batch's subset (default: train)")
    p.add_argument("--param", default="fc2.weight", help="parameter inside each layer (default: fc2.weight)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.set_defaults(func=init_grads)

    p = commands.add_parser("init-grads-plot", help="plot and table of init-grads outputs")
    p.add_argument("--run", type=labelled, action="append", required=True, help="LABEL=init-grads JSON (repeat)")
    p.add_argument("--out-dir", required=True, help="where init_grads.png and .md go")
    p.set_defaults(func=init_grads_plot)

    p = commands.add_parser("bleu-table", parents=[seeds], help="Xiong et al.: validation BLEU against updates, and test BLEU")
    p.add_argument("--run", type=labelled, action="append", required=True,
                   help="LABEL=directory with train.log (fairseq-train --eval-bleu) and generate_test.log")  # fmt: skip
    p.add_argument("--out-dir", required=True, help="where bleu.md and bleu.png go")
    p.set_defaults(func=bleu_table, run_dirs=True)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # fairseq-train arguments follow "--"
    parser = build_parser()
    args = parse(parser, argv[:cut])
    args.train_args = argv[cut + 1 :]
    if args.train_args and args.command not in TAKES_TRAIN_ARGS:
        parser.error(f"only {' and '.join(TAKES_TRAIN_ARGS)} take fairseq-train arguments after '--', not {args.command}")
    try:
        args.func(args)
    except (OSError, ValueError, RuntimeError) as e:
        sys.exit(f"normformer-analyze {args.command}: error: {e}")


if __name__ == "__main__":
    main()
