"""The paper's Table 1 as markdown, from the JSON results that ``normformer-zero-shot score`` writes.

Columns as in the paper: model, size, GPU days, learning rate, the five tasks' zero-shot accuracy
(HellaSwag, PIQA, WinoGrande, StoryCloze, OpenBookQA) and their average; a first row gives the
accuracy of random guessing on the same files.
"""
from statistics import mean
from typing import List

from .tasks import TASKS

COLUMNS = ["Model", "Size", "GPU Days", "LR"] + [spec.column for spec in TASKS.values()] + ["Avg"]
MISSING = "–"


def format_size(parameters: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if parameters >= scale:
            value = parameters / scale
            return f"{value:.0f}{unit}" if value >= 10 else f"{value:.1f}{unit}"
    return str(parameters)


def format_gpu_days(model: dict) -> str:
    """Training wall time x devices, in days; CPU runs say so instead (they are not GPU days)."""
    seconds = model.get("train_seconds")
    if seconds is None:
        return MISSING
    if model.get("cpu"):
        return f"CPU, {seconds / 60:.1f} min"
    return f"{seconds * model.get('devices', 1) / 86400:.2f}"


def _row(name, size, gpu_days, lr, accuracies: dict) -> List[str]:
    cells = [f"{accuracies[t]:.1f}" if t in accuracies else MISSING for t in TASKS]
    average = f"{mean(accuracies.values()):.1f}" if accuracies else MISSING
    return [name, size, gpu_days, lr] + cells + [average]


def table_rows(results: List[dict]) -> List[List[str]]:
    chance = {}
    for result in results:
        for task, entry in result["tasks"].items():
            chance.setdefault(task, entry["chance"])
    rows = [_row("Random", MISSING, MISSING, MISSING, chance)]
    for result in results:
        model = result["model"]
        accuracies = {task: entry["accuracy"] for task, entry in result["tasks"].items()}
        rows.append(_row(model["name"], format_size(model["parameters"]), format_gpu_days(model),
                         f"{model['lr']:g}", accuracies))  # fmt: skip
    return rows


def footnote(results: List[dict]) -> str:
    """Which normalization and how many examples each column used (from the first result)."""
    parts = []
    for task, spec in TASKS.items():
        for result in results:
            if task in result["tasks"]:
                entry = result["tasks"][task]
                how = ("partial scoring, " if spec.partial else "") + entry["normalization"]
                parts.append(f"{spec.column} = {task} ({entry['examples']} examples, {how})")
                break
    return "Zero-shot accuracy (%). " + "; ".join(parts) + "."


def markdown_table(results: List[dict]) -> str:
    if not results:
        raise ValueError("no results to tabulate")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    return "\n".join(lines) + "\n\n" + footnote(results) + "\n"
