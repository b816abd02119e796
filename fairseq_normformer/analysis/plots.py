"""PNG figures in the layout of the paper's Figs. 2-5 (matplotlib, Agg backend: no display needed)."""
import statistics
from pathlib import Path
from typing import Dict, List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .diagnostics import LAYER_RMS, QUANTITIES, curves  # noqa: E402
from .gamma import Gammas  # noqa: E402
from .lr_sensitivity import DIAGNOSTICS_BY_LR  # noqa: E402
from .seeds import mean_std  # noqa: E402
from ..instrumentation.param_groups import param_group  # noqa: E402
from .time_to_target import TimeToTarget  # noqa: E402
from .training_log import TrainingLog  # noqa: E402

STAR = {"marker": "*", "markersize": 16, "color": "gold", "mec": "black"}


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


def plot_grad_norms(runs: Dict[str, List[List[dict]]], path, local: str = "fc2.weight", layers=None) -> Path:
    """Fig. 3: mean |g| of one parameter (FC2's weight) against updates, one line per layer (the mean over
    the run's seeds, with a band of ± one standard deviation), one panel per run, shared y axis (log scale)."""
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.8), sharey=True, squeeze=False)
    for ax, (label, seeds) in zip(axes[0], runs.items()):
        curves = [layer_curves(records, local) for records in seeds]
        if not all(curves):
            raise ValueError(f"run {label!r} has no gradient records of '{local}' in its layers")
        for layer in curves[0]:
            if layers is None or layer in layers:
                updates, mean, std = mean_over_seeds([dict(zip(*seed[layer])) for seed in curves if layer in seed])
                plot_band(ax, updates, mean, std, f"layer {layer}")
        title = label if len(seeds) == 1 else f"{label} (mean ± std over {len(seeds)} seeds)"
        ax.set(title=title, xlabel="update", yscale="log")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(f"average L1 norm of grad, {local}")
    return _save(fig, path)


def plot_diagnostics(runs: Dict[str, List[List[dict]]], path) -> Path:
    """The scale diagnostics against updates: one row per quantity (the largest attention logit and the output RMS
    one line per layer, mean |log Z| one line), one column per run, each row's y axis shared; the mean over the
    run's seeds with a band of ± one standard deviation. The RMS on a log scale (it grows with depth)."""
    fig, axes = plt.subplots(len(QUANTITIES), len(runs), figsize=(5 * len(runs), 3.2 * len(QUANTITIES)),
                             sharey="row", squeeze=False)  # fmt: skip
    for column, (label, seeds) in enumerate(runs.items()):
        for row, (quantity, description) in enumerate(QUANTITIES):
            ax = axes[row][column]
            by_seed = [curves(records, quantity) for records in seeds]
            for line in by_seed[0]:
                plot_band(ax, *mean_over_seeds([seed[line] for seed in by_seed if line in seed]), line)
            ax.set(xlabel="update", yscale="log" if quantity == LAYER_RMS else "linear")
            ax.set_title(label if len(seeds) == 1 else f"{label} (mean ± std over {len(seeds)} seeds)", fontsize=9)
            if column == 0:
                ax.set_ylabel(description, fontsize=8)
            if len(by_seed[0]) > 1:
                ax.legend(fontsize=6)
    return _save(fig, path)


def plot_grad_ratios(per_seed: List[Dict[str, Dict[int, float]]], path, title: str) -> Path:
    """Fig. 5: candidate/baseline gradient ratio per parameter (one line each) against layer, the mean over
    the seeds' ratios ({name inside the layer: {layer: ratio}} each) with a band of ± one standard deviation."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for local in per_seed[0]:
        plot_band(ax, *mean_over_seeds([seed.get(local, {}) for seed in per_seed]), local)
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


def plot_lr_sensitivity(study: dict, path) -> Path:
    """The sensitivity curves (Wortsman et al. 2023's Fig. 1 layout) of ``normformer-analyze lr-sensitivity``."""
    return _save(lr_sensitivity_figure(study), path)


def lr_sensitivity_figure(study: dict):
    """The final loss, capped at the loss at initialisation, against the LR (log scale): one panel per scheme, one
    line per width (the study's read_study), a cross at l0 for each run that diverged; the axes shared."""
    names = list(next(iter(study["widths"].values())))
    columns = min(4, len(names))
    rows = -(-len(names) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), sharex=True, sharey=True, squeeze=False)
    for ax, name in zip(axes.flat, names):
        for width, schemes in study["widths"].items():
            ladder = schemes[name]
            lrs = sorted(ladder["capped_losses"], key=float)
            (line,) = ax.plot([float(lr) for lr in lrs], [ladder["capped_losses"][lr] for lr in lrs], marker=".",
                              label=f"width {width}")  # fmt: skip
            diverged = [float(lr) for lr in ladder["diverged"]]
            ax.plot(diverged, [ladder["initial_loss"]] * len(diverged), "x", color=line.get_color(), markersize=8)
        ax.set(title=study["labels"][name], xscale="log")
        ax.title.set_fontsize(9)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("final validation loss (base 2)", fontsize=8)
    for ax in axes.flat[max(0, len(names) - columns) : len(names)]:  # the lowest panel of each column
        ax.set_xlabel("learning rate")
        ax.xaxis.set_tick_params(labelbottom=True)
    axes[0][0].legend(fontsize=7)
    return fig


def plot_lr_sensitivity_diagnostics(study: dict, path) -> Path:
    return _save(lr_diagnostics_figure(study), path)


def lr_diagnostics_figure(study: dict):
    """Each diagnostic of every finished run (its last record) against the LR (Wortsman et al. 2023's attention-logit
    and output-logit growth): one row per diagnostic (log scales: they span decades where they grow), one column per
    width, one line per scheme; the rows' axes shared across widths."""
    widths = list(study["widths"])
    fig, axes = plt.subplots(len(DIAGNOSTICS_BY_LR), len(widths), figsize=(4.2 * len(widths), 3.0 * len(DIAGNOSTICS_BY_LR)),
                             sharex=True, sharey="row", squeeze=False)  # fmt: skip
    for column, width in enumerate(widths):
        for row, (key, what, _) in enumerate(DIAGNOSTICS_BY_LR):
            ax = axes[row][column]
            for k, (name, ladder) in enumerate(study["widths"][width].items()):
                lrs = sorted((lr for lr, d in ladder["diagnostics_by_lr"].items() if key in d), key=float)
                ax.plot([float(lr) for lr in lrs], [ladder["diagnostics_by_lr"][lr][key] for lr in lrs], marker=".",
                        color=f"C{k % 10}", linestyle=("-", "--")[k // 10 % 2], label=study["labels"][name])  # fmt: skip
            ax.set(xscale="log", yscale="log")
            ax.set_title(f"width {width}", fontsize=9)
            if column == 0:
                ax.set_ylabel(what, fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("learning rate")
    axes[0][-1].legend(fontsize=6)
    return fig


def mean_over_seeds(by_seed: List[dict]) -> tuple:
    """(the x every seed has, the mean over the seeds at each, the std or None) of per-seed {x: value}."""
    xs = sorted(set(by_seed[0]).intersection(*by_seed[1:]))
    values = [mean_std([seed[x] for seed in by_seed]) for x in xs]
    return xs, [m for m, _ in values], [s for _, s in values]


def seed_band(logs: List[TrainingLog], metric: str = "ppl") -> tuple:
    """(updates, mean wall time or None, mean, std or None) of a validation metric over the seeds, at the
    validations every seed has."""
    updates, mean, std = mean_over_seeds([{r["num_updates"]: r[metric] for r in log.valid if metric in r} for log in logs])
    walls = [[log.wall_at(u) for log in logs] for u in updates]
    wall = None if any(None in w for w in walls) else [statistics.fmean(w) for w in walls]
    return updates, wall, mean, std


def plot_band(ax, x, mean, std, label):
    """A line of the mean over the seeds and, with more than one seed, a band of ± one standard deviation."""
    ax.plot(x, mean, marker=".", label=label)
    if std and std[0] is not None:
        ax.fill_between(x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.25)


def plot_time_to_target(baselines: List[TrainingLog], candidates: List[TrainingLog], results: List[TimeToTarget],
                        path, labels=("Baseline", "NormFormer"), metric: str = "ppl") -> Path:  # fmt: skip
    """Fig. 2: validation perplexity against updates and wall time, the mean over seeds with a band of
    ± one standard deviation; a star marks each seed's first validation at which the candidate
    reaches that seed's baseline's final perplexity."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for logs, label in zip((baselines, candidates), labels):
        updates, walls, mean, std = seed_band(logs, metric)
        for ax, x in ((axes[0], updates), (axes[1], walls)):
            if x is not None:
                plot_band(ax, x, mean, std, label)
    for result in results:
        if result.hit_update is not None:
            axes[0].plot([result.hit_update], [result.hit_ppl], **STAR)
            if result.hit_wall is not None:
                axes[1].plot([result.hit_wall], [result.hit_ppl], **STAR)
    target = statistics.fmean(r.target_ppl for r in results)
    for ax, xlabel in zip(axes, ("update", "wall time (s)")):
        ax.axhline(target, color="gray", linewidth=0.8, linestyle="--")
        ax.set(xlabel=xlabel, yscale="log")
        ax.legend()
    axes[0].set_ylabel(f"validation {'perplexity' if metric == 'ppl' else metric}")
    if len(results) > 1:
        fig.suptitle(f"mean over {len(results)} seeds, band: ± one standard deviation")
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


def plot_valid_curves(runs: Dict[str, List[TrainingLog]], path, metric: str, ylabel: str, reference=None, ax=None):
    """A validation metric against updates, one line per run (the mean over its seeds, with a band of ± one
    standard deviation); reference (VALUE, LABEL): a dashed horizontal line (e.g. the unigram baseline).
    Draws on ``ax`` if given, else saves a figure of its own to ``path``."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2)) if ax is None else (None, ax)
    for label, logs in runs.items():
        updates, _, mean, std = seed_band(logs, metric)
        plot_band(ax, updates, mean, std, label)
    if reference is not None:
        ax.axhline(reference[0], color="gray", linewidth=0.8, linestyle="--", label=reference[1])
    seeds = max(len(logs) for logs in runs.values())
    ax.set(xlabel="update", ylabel=ylabel)
    if seeds > 1:
        ax.set_title(f"mean ± std over {seeds} seeds")
    ax.legend(fontsize=8)
    return None if fig is None else _save(fig, path)


def plot_mlm_curves(runs: Dict[str, List[TrainingLog]], path, unigram: dict) -> Path:
    """Masked-LM validation accuracy and perplexity against updates, with the unigram baseline's."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    plot_valid_curves(runs, None, "mlm_accuracy", "validation MLM accuracy (%)",
                      (unigram["accuracy"], "unigram baseline"), axes[0])  # fmt: skip
    plot_valid_curves(runs, None, "mlm_ppl", "validation MLM perplexity", (unigram["perplexity"], "unigram baseline"), axes[1])
    axes[1].set_yscale("log")
    return _save(fig, path)
