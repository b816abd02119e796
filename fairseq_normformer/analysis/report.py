"""Markdown tables with the paper's columns, from training logs and runner results. Every model is a
list of runs, one per seed: numbers are mean ± sd over the seeds (their column's header says "(mean ± sd)"),
and differences to the first row 95% intervals paired by seed (analysis/seeds.py). A table prints the numbers
of a column with one number of decimals, its largest number's 4 significant digits (column_format)."""
import math
from typing import Dict, List, Optional, Sequence

from ..runs.lr_stability import StabilityResult
from .grad_curves import first_layer_share
from .seeds import mean_std, paired_differences, t_interval
from .training_log import TrainingLog, read_eval_lm, read_training_log

NO_INTERVAL = "1 seed: no interval"
WITHIN_NOISE = "within seed noise"


def fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


class Numbers:
    """A cell of several numbers ("mean ± std", "mean [low, high]"): ``template`` with a ``{}`` for each,
    formatted in a table with its column's format, alone (``str``) each with ``fmt``."""

    def __init__(self, template: str, *values: float):
        self.template, self.values = template, values

    def format(self, number_format) -> str:
        return self.template.format(*map(number_format, self.values))

    def __str__(self) -> str:
        return self.format(fmt)


def column_format(column: Sequence):
    """One format for the floats of a column (alone or in Numbers cells): fixed decimals, 4 significant
    digits of the largest finite one; ints and other cells as ``fmt``."""
    floats = [v for cell in column for v in (cell.values if isinstance(cell, Numbers) else (cell,))
              if isinstance(v, float) and math.isfinite(v)]  # fmt: skip
    largest = max(map(abs, floats), default=0.0)
    decimals = max(0, 3 - math.floor(math.log10(largest))) if largest else 0
    number = lambda v: f"{v:.{decimals}f}" if isinstance(v, float) else fmt(v)  # noqa: E731
    return lambda cell: cell.format(number) if isinstance(cell, Numbers) else number(cell)


SD_HEADER = " (mean ± sd)"


def header_cell(header: str, column: Sequence) -> str:
    """The header, saying "(mean ± sd)" when the column holds a mean ± standard deviation over seeds."""
    spread = any(isinstance(cell, Numbers) and "±" in cell.template for cell in column)
    return header + SD_HEADER if spread else header


def markdown_table(headers: Sequence[str], rows: List[Sequence]) -> str:
    formats = [column_format(column) for column in zip(*rows)]
    headers = [header_cell(header, [row[k] for row in rows]) for k, header in enumerate(headers)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(f(v) for f, v in zip(formats, row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def mean_std_cell(values: Sequence[float]) -> Numbers:
    """"mean ± std" over the seeds; the value itself for one seed."""
    mean, std = mean_std(values)
    return Numbers("{}", mean) if std is None else Numbers("{} ± {}", mean, std)


def interval_cell(values: Sequence[float], null: float = 0.0) -> Numbers:
    """"mean [low, high]", the 95% t-interval of the mean of per-seed ``values`` (differences, fractions),
    "within seed noise" when it contains ``null`` (no difference); one seed has no interval."""
    interval = t_interval(values)
    if interval is None:
        return Numbers(f"{{}} ({NO_INTERVAL})", values[0])
    noise = f" {WITHIN_NOISE}" if interval.contains(null) else ""
    return Numbers("{} [{}, {}]" + noise, interval.mean, interval.low, interval.high)


def per_seed_cell(values: Sequence) -> str:
    """The value shared by every seed, else each seed's, in seed order (settings, categories)."""
    distinct = list(dict.fromkeys(values))
    return fmt(distinct[0]) if len(distinct) == 1 else ", ".join(fmt(v) for v in values)


def difference_column(metric: Dict[str, List[float]], reference: Optional[str] = None) -> List:
    """Per label: the interval of its per-seed differences to the reference label's (default: the first
    label; None for the reference itself)."""
    reference = reference or next(iter(metric))
    base = metric[reference]
    return [None if label == reference else
            interval_cell(paired_differences(values, base, f"rows {reference!r} and {label!r}"))
            for label, values in metric.items()]  # fmt: skip


PPL_HEADERS = ("Model", "Params", "Seeds", "Updates", "Valid PPL", "Best valid PPL", "Δ valid PPL vs first row (95% CI)")


def ppl_headers(compare_to: Optional[str] = None) -> tuple:
    return PPL_HEADERS + ((f"Δ valid PPL vs {compare_to} (95% CI)",) if compare_to else ())


def ppl_rows(runs: Dict[str, List[TrainingLog]], compare_to: Optional[str] = None) -> List[list]:
    """One row per model: its final and best validation perplexity over the seeds (Tables 5-7), its
    difference to the first row and, with ``compare_to``, to that row too (Table 5: to NormFormer)."""
    final = {label: [log.final_valid()["ppl"] for log in logs] for label, logs in runs.items()}
    columns = [difference_column(final)] + ([difference_column(final, compare_to)] if compare_to else [])
    rows = []
    for (label, logs), *deltas in zip(runs.items(), *columns):
        updates = [log.final_valid()["num_updates"] for log in logs]
        best = [min(r["ppl"] for r in log.valid) for log in logs]
        rows.append([label, logs[0].num_params, len(logs), per_seed_cell(updates), mean_std_cell(final[label]),
                     mean_std_cell(best), *deltas])  # fmt: skip
    return rows


def grid_outcome(log: TrainingLog) -> str:
    """finished, or why not: the numerical failure fairseq stopped on, or a run cut short."""
    if log.failure is not None:
        return "diverged"
    return "finished" if log.seconds is not None else "unfinished"


def best_in_grid(logs: Dict[str, TrainingLog], metric: str = "ppl") -> tuple:
    """(the best LR, where it lies among the LRs: lowest, highest or inside) of one model's LR grid, by its final
    validation ``metric`` (lower is better); a diverged or unfinished run is never the best."""
    lrs = sorted(logs, key=float)
    finals = {lr: logs[lr].final_metric(metric) for lr in lrs if grid_outcome(logs[lr]) == "finished"}
    if not finals:
        raise ValueError(f"no run of the grid (LRs {', '.join(lrs)}) finished")
    best = min(finals, key=finals.get)
    position = "lowest" if best == lrs[0] else "highest" if best == lrs[-1] else "inside"
    return best, position


def lr_grid_headers(metric: str = "ppl") -> tuple:
    return ("LR", "Params", "Outcome", "Updates", f"Valid {metric}")


def lr_grid_rows(logs: Dict[str, TrainingLog], metric: str = "ppl") -> List[list]:
    """One row per LR, lowest first: outcome, updates reached, the last validation's ``metric`` (none before
    the first validation)."""
    return [[lr, log.num_params, grid_outcome(log), log.last_update(), log.valid[-1].get(metric) if log.valid else None]
            for lr, log in sorted(logs.items(), key=lambda item: float(item[0]))]  # fmt: skip


def layer_share_table(runs: Dict[str, List[Dict[int, float]]]) -> str:
    """Fig. 3 as numbers: per model, each layer's mean |g| ({layer: value} per seed; mean ± std over the
    seeds) and the first layer's share (over the mean of the others) with its paired interval to the first row."""
    layers = list(next(iter(runs.values()))[0])
    share = {label: [first_layer_share(seed) for seed in seeds] for label, seeds in runs.items()}
    headers = ("Model", "Seeds", *(f"layer {layer}" for layer in layers), "Layer 0 / mean of the others",
               "Δ vs first row (95% CI)")  # fmt: skip
    rows = [[label, len(seeds), *(mean_std_cell([seed[layer] for seed in seeds]) for layer in layers),
             mean_std_cell(share[label]), delta]
            for (label, seeds), delta in zip(runs.items(), difference_column(share))]  # fmt: skip
    return markdown_table(headers, rows)


LR_HEADERS = ("Model", "Peak LR", "Seeds", "Outcome", "Last good update", "LR reached", "First overflow: layer",
              "First overflow: operation", "Max abs. activation", "Overflow at update",
              "Δ last good update vs first row (95% CI)")  # fmt: skip


def lr_rows(results: Dict[str, List[StabilityResult]]) -> List[list]:
    """Table 3: one row per model; the overflow's place per seed when the seeds disagree."""
    last_good = {label: [r.last_good_update for r in runs] for label, runs in results.items()}
    rows = []
    for (label, runs), delta in zip(results.items(), difference_column(last_good)):
        overflows = [r.first_overflow or {} for r in runs]
        reached = [r.lr_reached for r in runs if r.lr_reached is not None]
        rows.append([label, per_seed_cell([r.peak_lr for r in runs]), len(runs), per_seed_cell([r.outcome for r in runs]),
                     mean_std_cell(last_good[label]), mean_std_cell(reached) if reached else None]
                    + [per_seed_cell([o.get(key) for o in overflows]) for key in ("layer", "operation", "max_abs", "update")]
                    + [delta])  # fmt: skip
    return rows


EVAL_HEADERS = ("Model", "Params", "Seeds", "Valid PPL", "Test PPL", "Δ valid PPL vs first row (95% CI)",
                "Δ test PPL vs first row (95% CI)")  # fmt: skip


def eval_rows(run_dirs: Dict[str, List[str]]) -> List[list]:
    """Table 8: one row per model, from run directories holding train.log, eval_valid.log and eval_test.log."""
    ppl = {split: {label: [read_eval_lm(f"{d}/eval_{split}.log")["ppl"] for d in dirs] for label, dirs in run_dirs.items()}
           for split in ("valid", "test")}  # fmt: skip
    deltas = zip(difference_column(ppl["valid"]), difference_column(ppl["test"]))
    rows = []
    for (label, dirs), (valid_delta, test_delta) in zip(run_dirs.items(), deltas):
        params = read_training_log(f"{dirs[0]}/train.log").num_params
        rows.append([label, params, len(dirs), mean_std_cell(ppl["valid"][label]), mean_std_cell(ppl["test"][label]),
                     valid_delta, test_delta])  # fmt: skip
    return rows


def valid_table(runs: Dict[str, List[TrainingLog]], metrics: Sequence[str]) -> str:
    """One row per model: updates, training time and the last validation's ``metrics``, mean ± std over the
    seeds, each metric's difference to the first row (95% interval, paired by seed)."""
    headers = ["Model", "Seeds", "Updates", "Training time (s)"]
    rows = {}
    for label, logs in runs.items():
        seconds = [log.seconds for log in logs]
        updates = per_seed_cell([log.final_valid()["num_updates"] for log in logs])
        rows[label] = [label, len(logs), updates, None if None in seconds else mean_std_cell(seconds)]
    for metric in metrics:
        headers += [f"Valid {metric}", f"Δ {metric} vs first row (95% CI)"]
        values = {label: [log.final_metric(metric) for log in logs] for label, logs in runs.items()}
        for (label, per_seed), delta in zip(values.items(), difference_column(values)):
            rows[label] += [mean_std_cell(per_seed), delta]
    return markdown_table(headers, list(rows.values()))
