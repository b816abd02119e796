"""The paper's Table 1 as markdown, from the JSON results that ``normformer-zero-shot score`` writes.

Columns as in the paper: model, size, GPU days, learning rate, the five tasks' zero-shot accuracy
(HellaSwag, PIQA, WinoGrande, StoryCloze, OpenBookQA) and their average; a first row gives the
accuracy of random guessing on the same files. Results with the same model name are seeds of one model:
its accuracies are mean ± std over them, and the last column is the difference of its average to the
first model's, a 95% interval paired by seed (analysis/seeds.py; GPU days are those of its first seed).
"""
from statistics import mean
from typing import Dict, List

from ..analysis.report import difference_column
from ..analysis.seeds import mean_std
from .tasks import TASKS

COLUMNS = (["Model", "Size", "GPU Days", "LR", "Seeds"] + [spec.column for spec in TASKS.values()]
           + ["Avg", "Δ Avg vs first model (95% CI)"])  # fmt: skip
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


def accuracy_cell(values: List[float]) -> str:
    """An accuracy (%), mean ± std over the seeds."""
    average, std = mean_std(values)
    return f"{average:.1f}" if std is None else f"{average:.1f} ± {std:.1f}"


def seed_averages(accuracies: Dict[str, List[float]]) -> List[float]:
    """Each seed's average over the tasks of ``accuracies`` ({task: the accuracy of each seed})."""
    return [mean(per_seed) for per_seed in zip(*accuracies.values())]


def _row(name, size, gpu_days, lr, seeds, accuracies: Dict[str, List[float]], delta=MISSING) -> List[str]:
    cells = [accuracy_cell(accuracies[t]) if t in accuracies else MISSING for t in TASKS]
    averages = seed_averages(accuracies)
    return [name, size, gpu_days, lr, seeds] + cells + [accuracy_cell(averages) if averages else MISSING, delta]


def by_model(results: List[dict]) -> Dict[str, List[dict]]:
    """{model name: its results, one per seed}, in the order of the first of each."""
    grouped: Dict[str, List[dict]] = {}
    for result in results:
        grouped.setdefault(result["model"]["name"], []).append(result)
    return grouped


def seed_accuracies(seeds: List[dict]) -> Dict[str, List[float]]:
    """{task: each seed's accuracy} for the tasks every seed scored."""
    tasks = [task for task in seeds[0]["tasks"] if all(task in s["tasks"] for s in seeds)]
    return {task: [s["tasks"][task]["accuracy"] for s in seeds] for task in tasks}


def table_rows(results: List[dict]) -> List[List[str]]:
    chance = {}
    for result in results:
        for task, entry in result["tasks"].items():
            chance.setdefault(task, [entry["chance"]])
    rows = [_row("Random", MISSING, MISSING, MISSING, MISSING, chance)]
    models = by_model(results)
    accuracies = {name: seed_accuracies(seeds) for name, seeds in models.items()}
    averages = {name: seed_averages(acc) for name, acc in accuracies.items()}
    for (name, seeds), delta in zip(models.items(), difference_column(averages)):
        model = seeds[0]["model"]
        rows.append(_row(name, format_size(model["parameters"]), format_gpu_days(model), f"{model['lr']:g}",
                         str(len(seeds)), accuracies[name], MISSING if delta is None else str(delta)))  # fmt: skip
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
