"""Reading grad-norm files written by ``--grad-norm-file`` (instrumentation/grad_norms.py), Fig. 3's
first-layer share and the per-layer ratios of Fig. 5."""
import json
from typing import Dict, List

from ..instrumentation.param_groups import param_group


def read_grad_norms(path) -> List[dict]:
    """The records of a grad-norm file, sorted by update; a later record of an update replaces an
    earlier one (a resumed run re-records the updates after its checkpoint)."""
    return read_update_records(path, "grad-norm")


def read_update_records(path, kind: str) -> List[dict]:
    """The records of a JSON Lines file of ``kind`` written every N updates (--grad-norm-file, --diagnostics-file),
    sorted by update, the last record of each update kept."""
    by_update = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                by_update[int(record["update"])] = record
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number} is not a {kind} record ({e})") from None
    if not by_update:
        raise ValueError(f"{path} holds no {kind} records")
    return [by_update[u] for u in sorted(by_update)]


def window_means(records: List[dict], start: int, end: int) -> Dict[str, float]:
    """{group key: mean over the records with start <= update <= end} (Fig. 5 averages a window)."""
    window = [r["grad_l1"] for r in records if start <= r["update"] <= end]
    if not window:
        raise ValueError(f"no grad-norm record between updates {start} and {end}")
    keys = set(window[0]).intersection(*window[1:])
    return {k: sum(w[k] for w in window) / len(window) for k in sorted(keys)}


def grad_ratios(candidate: List[dict], baseline: List[dict], start: int, end: int) -> Dict[str, Dict[int, float]]:
    """Fig. 5: {name inside the layer: {layer: candidate mean |g| / baseline mean |g|}} over the
    window, for the layer parameters both models have."""
    numer, denom = window_means(candidate, start, end), window_means(baseline, start, end)
    ratios: Dict[str, Dict[int, float]] = {}
    for key in set(numer) & set(denom):
        group = param_group(key)
        if group.layer is not None and denom[key] > 0:
            ratios.setdefault(group.local, {})[group.layer] = numer[key] / denom[key]
    return {local: dict(sorted(by_layer.items())) for local, by_layer in sorted(ratios.items())}


def layer_means(records: List[dict], local: str, start: int, end: int) -> Dict[int, float]:
    """{layer: mean |g| of the parameter ``local`` (e.g. fc2.weight) over updates start..end} (Fig. 3)."""
    by_layer = {}
    for key, value in window_means(records, start, end).items():
        group = param_group(key)
        if group.layer is not None and group.local == local:
            by_layer[group.layer] = value
    return dict(sorted(by_layer.items()))


def first_layer_share(by_layer: Dict[int, float]) -> float:
    """Fig. 3's pattern in one number: the first layer's mean |g| over the mean of the other layers' (NaN
    for a model of one layer)."""
    first, *others = by_layer.values()
    return first / (sum(others) / len(others)) if others else float("nan")
