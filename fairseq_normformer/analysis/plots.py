"""PNG figures in the layout of the paper's Figs. 2-5 (matplotlib, Agg backend: no display needed)."""
from pathlib import Path
from typing import Dict, List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .gamma import Gammas  # noqa: E402
from ..instrumentation.param_groups import param_group  # noqa: E402
from .time_to_target import TimeToTarget  # noqa: E402
from .training_log import TrainingLog  # noqa: E402


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def layer_curves(records: List[dict], local: str) -> Dict[int, tuple]:
    """{layer: (updates, values)} of the parameter named ``local`` inside each layer."""
    curves: Dict[int, tuple] = {}
    for record in records:
        for key, value in record["grad_l1"].items():
            group = param_group(key)
            if group.layer is not None and group.local == local:
                updates, values = curves.setdefault(group.layer, ([], []))
                updates.append(record["update"])
                values.append(value)
    return dict(sorted(curves.items()))


def plot_grad_norms(runs: Dict[str, List[dict]], path, local: str = "fc2.weight", layers=None) -> Path:
    """Fig. 3: mean |g| of one parameter (FC2's weight) against updates, one line per layer, one
    panel per run, shared y axis (log scale)."""
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.8), sharey=True, squeeze=False)
    for ax, (label, records) in zip(axes[0], runs.items()):
        curves = layer_curves(records, local)
        if not curves:
            raise ValueError(f"run {label!r} has no gradient records of '{local}' in its layers")
        for layer, (updates, values) in curves.items():
            if layers is None or layer in layers:
                ax.plot(updates, values, label=f"layer {layer}")
        ax.set(title=label, xlabel="update", yscale="log")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(f"average L1 norm of grad, {local}")
    return _save(fig, path)


def plot_grad_ratios(ratios: Dict[str, Dict[int, float]], path, title: str) -> Path:
    """Fig. 5: candidate/baseline gradient ratio per parameter (one line each) against layer."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for local, by_layer in ratios.items():
        ax.plot(list(by_layer), list(by_layer.values()), marker="o", label=local)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set(title=title, xlabel="layer", ylabel="mean |grad| ratio", yscale="log")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def plot_gammas(gammas: Gammas, path, title: Optional[str] = None) -> Path:
    """Fig. 4: the distribution of each added operation's γ per layer (box plots)."""
    fig, axes = plt.subplots(1, len(gammas), figsize=(4.5 * len(gammas), 3.8), squeeze=False)
    for ax, (label, by_layer) in zip(axes[0], gammas.items()):
        ax.boxplot(list(by_layer.values()), positions=list(by_layer), showfliers=True, flierprops={"markersize": 2})
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")  # the initial value
        ax.set(title=label, xlabel="layer", ylabel="γ")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def plot_time_to_target(baseline: TrainingLog, candidate: TrainingLog, result: TimeToTarget, path,
                        labels=("Baseline", "NormFormer")) -> Path:  # fmt: skip
    """Fig. 2: validation perplexity against updates and wall time; the star marks the first
    validation at which the candidate reaches the baseline's final perplexity."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for log, label in zip((baseline, candidate), labels):
        updates = [r["num_updates"] for r in log.valid]
        ppl = [r["ppl"] for r in log.valid]
        axes[0].plot(updates, ppl, marker=".", label=label)
        walls = [log.wall_at(u) for u in updates]
        if None not in walls:
            axes[1].plot(walls, ppl, marker=".", label=label)
    if result.hit_update is not None:
        axes[0].plot([result.hit_update], [result.hit_ppl], marker="*", markersize=16, color="gold", mec="black")
        if result.hit_wall is not None:
            axes[1].plot([result.hit_wall], [result.hit_ppl], marker="*", markersize=16, color="gold", mec="black")
    for ax, xlabel in zip(axes, ("update", "wall time (s)")):
        ax.axhline(result.target_ppl, color="gray", linewidth=0.8, linestyle="--")
        ax.set(xlabel=xlabel, yscale="log")
        ax.legend()
    axes[0].set_ylabel("validation perplexity")
    return _save(fig, path)


def plot_init_grads(runs: Dict[str, Dict[str, Dict[int, float]]], path, param: str = "fc2.weight") -> Path:
    """Xiong et al.'s Fig. 3: ||grad|| of one parameter per layer at initialization, one panel per
    stack (encoder, decoder), one line per run (log scale)."""
    stacks = list(dict.fromkeys(stack for by_stack in runs.values() for stack in by_stack))
    fig, axes = plt.subplots(1, len(stacks), figsize=(4.5 * len(stacks), 3.6), sharey=True, squeeze=False)
    for ax, stack in zip(axes[0], stacks):
        for label, by_stack in runs.items():
            if stack in by_stack:
                layers = sorted(by_stack[stack])
                ax.plot([layer + 1 for layer in layers], [by_stack[stack][k] for k in layers], marker="o", label=label)
        ax.set(title=stack, xlabel="layer", yscale="log")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(f"||grad {param}|| at init")
    return _save(fig, path)


def plot_bleu_curves(runs: Dict[str, TrainingLog], path) -> Path:
    """Xiong et al.'s Fig. 2 layout: validation BLEU against updates, one line per run."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, log in runs.items():
        points = [(r["num_updates"], r["bleu"]) for r in log.valid if "bleu" in r]
        if not points:
            raise ValueError(f"run {label!r} ({log.path}) has no validation BLEU (train with --eval-bleu)")
        ax.plot(*zip(*points), marker="o", label=label)
    ax.set(xlabel="update", ylabel="validation BLEU (sacrebleu)")
    ax.legend(fontsize=8)
    return _save(fig, path)
