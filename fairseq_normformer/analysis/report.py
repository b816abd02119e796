"""Markdown tables with the paper's columns, from training logs and runner results."""
from typing import Dict, List, Sequence

from ..runs.lr_stability import StabilityResult
from .training_log import TrainingLog, read_eval_lm, read_training_log


def fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: List[Sequence]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


PPL_HEADERS = ("Model", "Params", "Updates", "Valid PPL", "Best valid PPL", "Δ PPL vs first row")


def ppl_rows(runs: Dict[str, TrainingLog]) -> List[list]:
    """One row per run: its final and best validation perplexity (Tables 5-8)."""
    rows, first = [], None
    for label, log in runs.items():
        final = log.final_valid()
        first = final["ppl"] if first is None else first
        best = min(r["ppl"] for r in log.valid)
        rows.append([label, log.num_params, final["num_updates"], final["ppl"], best, final["ppl"] - first])
    return rows


LR_HEADERS = ("Model", "Peak LR", "Outcome", "Last good update", "LR reached", "First overflow: layer",
              "First overflow: operation", "Max abs. activation", "Overflow at update")  # fmt: skip


def lr_rows(results: Dict[str, StabilityResult]) -> List[list]:
    """Table 3: one row per model."""
    rows = []
    for label, r in results.items():
        o = r.first_overflow or {}
        rows.append([label, r.peak_lr, r.outcome, r.last_good_update, r.lr_reached,
                     o.get("layer"), o.get("operation"), o.get("max_abs"), o.get("update")])  # fmt: skip
    return rows


EVAL_HEADERS = ("Model", "Params", "Valid PPL", "Test PPL")


def eval_rows(run_dirs: Dict[str, str]) -> List[list]:
    """Table 8: one row per run directory holding train.log, eval_valid.log and eval_test.log."""
    rows = []
    for label, run_dir in run_dirs.items():
        params = read_training_log(f"{run_dir}/train.log").num_params
        ppl = [read_eval_lm(f"{run_dir}/eval_{split}.log")["ppl"] for split in ("valid", "test")]
        rows.append([label, params] + ppl)
    return rows
