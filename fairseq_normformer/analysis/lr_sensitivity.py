"""normformer-analyze lr-sensitivity: Wortsman et al. 2023's LR sensitivity ("Small-scale proxies for large-scale
Transformer training instabilities", §3.1) of each scheme at each width of a sweep (recipes/lr_sensitivity.sh,
recipes/sweeps/lr_sensitivity.yaml), the best loss and its LR, the largest stable LR and the scale diagnostics at
that LR, then each across the widths and against the baseline scheme (docs/analysis.md).

Losses are fairseq's (base 2, per token): a run's final loss is its last validation's, the loss at initialisation
l0 the training loss of update 1 (the initial parameters' on the first batch; the runs of a ladder share the seed,
so it is one number per scheme and width)."""
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from ..instrumentation.diagnostics import ABS_LOG_Z, ATTN_LOGIT, LAYER_RMS
from ..runs.run_dir import grid_dir
from .diagnostics import final_values, read_diagnostics
from .report import fmt, grid_outcome, markdown_table
from .sweep_tables import MANIFEST, load_manifest
from .training_log import read_training_log

DIAGNOSTICS = "diagnostics.jsonl"  # the spec's --diagnostics-file in each run directory


# --- the measure ------------------------------------------------------------------------------------------
def capped(final: Optional[float], initial: float) -> float:
    """min(l(eta), l0): a final loss capped at the loss at initialisation; a diverged run (None) or a loss that is
    not finite counts as l0."""
    return initial if final is None or not math.isfinite(final) else min(final, initial)


def best_loss(finals: Dict[str, Optional[float]], initial: float) -> Optional[tuple]:
    """(l*, its LR): l* = min over the LRs eta of l(eta), among the runs that ended below l0; None when none did."""
    below = {lr: loss for lr, loss in finals.items() if capped(loss, initial) < initial}
    return None if not below else min(((loss, lr) for lr, loss in below.items()), key=lambda pair: pair[0])


def lr_sensitivity(finals: Dict[str, Optional[float]], initial: float) -> Optional[float]:
    """Wortsman et al. 2023, §3.1: S = mean over the LRs eta of [min(l(eta), l0) - l*], l* = min over eta of l(eta)
    (``best_loss``), l0 the loss at initialisation; a diverged run counts as l0. None when no run ended below l0
    (S would be 0, as for a scheme insensitive to the LR)."""
    best = best_loss(finals, initial)
    if best is None:
        return None
    return sum(capped(loss, initial) - best[0] for loss in finals.values()) / len(finals)


def largest_stable_lr(finals: Dict[str, Optional[float]], initial: float) -> Optional[str]:
    """The largest LR whose run finished (did not diverge) with its final loss below l0."""
    stable = [lr for lr, loss in finals.items() if capped(loss, initial) < initial]
    return max(stable, key=float, default=None)


# --- one sweep directory --------------------------------------------------------------------------------------
@dataclass
class Ladder:
    """One scheme at one width: l0, each LR's final loss (None: diverged) and run directory."""

    initial: float
    finals: Dict[str, Optional[float]]
    run_dirs: Dict[str, Path]

    def summary(self) -> dict:
        """The row of lr_sensitivity.md and lr_sensitivity.json: l0, l* and its LR, S, the largest stable LR and the
        diagnostics of its run's last record (empty without a diagnostics file), then each finished run's
        diagnostics by LR (Wortsman et al.'s attention-logit and log Z growth with the LR)."""
        best, stable = best_loss(self.finals, self.initial), largest_stable_lr(self.finals, self.initial)
        by_lr = {lr: diagnostics_at(self.run_dirs[lr]) for lr, loss in self.finals.items() if loss is not None}
        return {"initial_loss": self.initial, "best_loss": best and best[0], "best_lr": best and best[1],
                "lr_sensitivity": lr_sensitivity(self.finals, self.initial), "largest_stable_lr": stable,
                "diverged": [lr for lr, loss in self.finals.items() if loss is None],
                "capped_losses": {lr: capped(loss, self.initial) for lr, loss in self.finals.items()},
                **(by_lr[stable] if stable else {}),
                "diagnostics_by_lr": {lr: values for lr, values in by_lr.items() if values}}  # fmt: skip


def diagnostics_at(run_dir: Path) -> dict:
    """The largest attention logit over the layers, the output logits' mean |log Z| and the last layer's output RMS
    at the last update the run's diagnostics file recorded, and the largest |log Z| of any of its records (an
    excursion at the peak LR that has settled by the end); nothing when it has no diagnostics file."""
    if not (run_dir / DIAGNOSTICS).exists():
        return {}
    records = read_diagnostics(run_dir / DIAGNOSTICS)
    update, final = final_values([records])
    last_layer = max(final[LAYER_RMS], key=lambda layer: int(layer.rsplit(".", 1)[1]))
    return {"diagnostics_update": update, "attn_logit": max(v[0] for v in final[ATTN_LOGIT].values()),
            "abs_log_z": next(iter(final[ABS_LOG_Z].values()))[0], "last_layer_rms": final[LAYER_RMS][last_layer][0],
            "peak_abs_log_z": max(r[ABS_LOG_Z] for r in records)}


def ladder_of(run_dirs: Dict[str, Path]) -> Ladder:
    """A scheme's runs at one width ({lr: run directory}), each finished or diverged."""
    finals, initials = {}, []
    for lr, run_dir in sorted(run_dirs.items(), key=lambda item: float(item[0])):
        log = read_training_log(run_dir / "train.log")
        outcome = grid_outcome(log)
        if outcome == "unfinished":
            raise ValueError(f"{run_dir} is unfinished: run normformer-sweep again")
        finals[lr] = None if outcome == "diverged" else log.final_metric("loss")
        initials += [r["loss"] for r in log.train if r.get("num_updates") == 1]
    if not initials:
        raise ValueError(f"no run of {', '.join(map(str, run_dirs.values()))} logged update 1's loss (the loss at "
                         "initialisation): train with --log-interval 1")  # fmt: skip
    return Ladder(initials[0], finals, run_dirs)


def width_dirs(out: Path, sizes: Optional[List[str]] = None) -> List[Path]:
    """The sweeps of a directory: itself when it holds a manifest, else each SIZE/ of a spec's `each_size` (only
    ``sizes`` when given)."""
    if (out / MANIFEST).exists():
        if sizes:
            raise ValueError(f"{out} is one sweep, without sizes (--size picks SIZE/ directories of a spec with each_size)")
        return [out]
    found = sorted(path.parent for path in out.glob(f"*/{MANIFEST}"))
    if not found:
        raise ValueError(f"{out} holds no sweep ({MANIFEST}, or SIZE/{MANIFEST}; normformer-sweep writes them)")
    names = [path.name for path in found]
    missing = [size for size in sizes or [] if size not in names]
    if missing:
        raise ValueError(f"{out} has no sweep of size {', '.join(missing)} (it has {', '.join(names)})")
    return [path for path in found if not sizes or path.name in sizes]


def width_of(manifest: dict) -> str:
    variables = manifest["variables"]
    return str(variables.get("width", variables.get("size", manifest["scale"])))


def read_study(out: Path, sizes: Optional[List[str]] = None) -> dict:
    """{"baseline", "labels": {scheme: label}, "widths": {width: {scheme: Ladder summary}}}, the widths narrowest
    first (the order of their `width` variable, numbers); only the SIZE/ directories ``sizes`` when given."""
    widths, labels, baseline = {}, {}, None
    for path in width_dirs(Path(out), sizes):
        m = load_manifest(path)
        spec = m["spec"]
        labels.update({name: s.get("label", name) for name, s in spec["schemes"].items()})
        baseline = spec.get("baseline", next(iter(spec["schemes"])))
        widths[width_of(m)] = {name: ladder_of({lr: grid_dir(path, spec, name, lr) for lr in lrs}).summary()
                               for name, lrs in m["lrs"].items()}  # fmt: skip
    order = sorted(widths, key=lambda w: float(w)) if all(is_number(w) for w in widths) else list(widths)
    return {"baseline": baseline, "labels": labels, "widths": {w: widths[w] for w in order}}


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --- tables -------------------------------------------------------------------------------------------------
SUMMARY_HEADERS = ("Width", "Scheme", "Loss at init", "Best loss", "Best LR", "LR sensitivity", "Largest stable LR",
                   "Diverged", "Largest attention logit", r"Mean \|log Z\|", "Last layer RMS")  # fmt: skip
# (key, what, compared as): each scheme's value per width, then its difference to (ratio over) the baseline's
TREND = (("best_loss", "best final validation loss (base 2)", "difference"), ("lr_sensitivity", "LR sensitivity", "difference"),
         ("largest_stable_lr", "largest stable LR", "ratio"), ("attn_logit", "largest attention logit at the largest stable LR", "difference"),
         ("abs_log_z", "mean |log Z| at the largest stable LR", "difference"),
         ("last_layer_rms", "last layer's output RMS at the largest stable LR", "difference"))  # fmt: skip

# the diagnostics of every finished run, by LR: (key, what, read where)
LAST = "at each finished run's last diagnostics record"
DIAGNOSTICS_BY_LR = (("attn_logit", "largest attention logit", LAST), ("abs_log_z", "mean |log Z|", LAST),
                     ("last_layer_rms", "last layer's output RMS", LAST),
                     ("peak_abs_log_z", "largest mean |log Z| of a record", "over each finished run's diagnostics records"))  # fmt: skip


def summary_table(study: dict) -> str:
    rows = [[width, study["labels"][name], s["initial_loss"], s["best_loss"], s["best_lr"], s["lr_sensitivity"],
             s["largest_stable_lr"], ", ".join(s["diverged"]) or None, s.get("attn_logit"), s.get("abs_log_z"),
             s.get("last_layer_rms")]
            for width, schemes in study["widths"].items() for name, s in schemes.items()]  # fmt: skip
    return markdown_table(SUMMARY_HEADERS, rows)


def by_lr_table(study: dict, width: str, key: Optional[str] = None) -> str:
    """Each scheme's final loss at each LR of one width, capped at l0 (the sensitivity curves as numbers), or with
    ``key`` a diagnostic of each finished run at its last record (4 significant digits: they span decades)."""
    schemes = study["widths"][width]
    lrs = sorted({lr for s in schemes.values() for lr in s["capped_losses"]}, key=float)
    value = (lambda s, lr: s["capped_losses"].get(lr)) if key is None else (
        lambda s, lr: fmt(s["diagnostics_by_lr"].get(lr, {}).get(key)))  # fmt: skip
    rows = [[study["labels"][name], *(value(s, lr) for lr in lrs)] for name, s in schemes.items()]
    return markdown_table(["Scheme", *(f"lr {lr}" for lr in lrs)], rows)


def compared(value, base, how: str) -> Optional[float]:
    """A scheme's value against the baseline's: value - base, or value / base (LRs)."""
    if value is None or base is None:
        return None
    return float(value) / float(base) if how == "ratio" else float(value) - float(base)


def trend_rows(study: dict, key: str, how: str) -> List[list]:
    """Per scheme: its value at each width, its difference to (ratio over) the baseline's at each width, and how
    that changes from the narrowest width to the widest (difference: widest - narrowest; ratio: widest / narrowest)."""
    widths, baseline, rows = list(study["widths"]), study["baseline"], []
    for name in study["widths"][widths[0]]:
        values = [study["widths"][w].get(name, {}).get(key) for w in widths]
        against = [compared(v, study["widths"][w].get(baseline, {}).get(key), how) for v, w in zip(values, widths)]
        change = compared(against[-1], against[0], how) if name != baseline and len(widths) > 1 else None
        rows.append([study["labels"][name], *values, *(a if name != baseline else None for a in against), change])
    return rows


def trend_table(study: dict, key: str, how: str) -> str:
    widths, base = list(study["widths"]), study["labels"][study["baseline"]]
    sign = "÷" if how == "ratio" else "−"
    headers = ["Scheme", *(f"width {w}" for w in widths), *(f"{sign} {base}, width {w}" for w in widths),
               f"change, width {widths[0]} → {widths[-1]}"]  # fmt: skip
    return markdown_table(headers, trend_rows(study, key, how))


def write_reports(study: dict, out: Path) -> List[Path]:
    """OUT/lr_sensitivity.md (per scheme and width, and each width's losses by LR), OUT/lr_sensitivity_trend.md
    (each measure across widths and against the baseline) and OUT/lr_sensitivity.json (every number)."""
    widths = ", ".join(study["widths"])
    parts = [f"LR sensitivity (Wortsman et al. 2023) per scheme and width ({widths}); losses base 2, final validation\n\n",
             summary_table(study)]  # fmt: skip
    for width in study["widths"]:
        parts += [f"\nWidth {width}: final validation loss by LR, capped at the loss at initialisation (a diverged run counts as that loss)\n\n",
                  by_lr_table(study, width)]  # fmt: skip
        parts += [f"\nWidth {width}: {what} by LR, {where} (— diverged, or not logged)\n\n{by_lr_table(study, width, key)}"
                  for key, what, where in DIAGNOSTICS_BY_LR]  # fmt: skip
    trend = [f"Each measure across widths ({widths}) and against {study['labels'][study['baseline']]}: an advantage "
             "that grows with width is a change below 0 for the best loss and the LR sensitivity, above 1 for the "
             "largest stable LR\n"]  # fmt: skip
    for key, what, how in TREND:
        trend += [f"\n{what[0].upper()}{what[1:]}\n\n", trend_table(study, key, how)]
    paths = [out / "lr_sensitivity.md", out / "lr_sensitivity_trend.md", out / "lr_sensitivity.json"]
    for path, text in zip(paths, ["".join(parts), "".join(trend), json.dumps(study, indent=2) + "\n"]):
        path.write_text(text, encoding="utf-8")
    return paths
