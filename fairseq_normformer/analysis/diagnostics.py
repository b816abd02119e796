"""Reading diagnostics files written by ``--diagnostics-file`` (instrumentation/diagnostics.py): each quantity's
curves against updates, one per layer, and the values of the last update every seed recorded."""
from typing import Dict, List

from ..instrumentation.diagnostics import ABS_LOG_Z, ATTN_LOGIT, LAYER_RMS
from .grad_curves import read_update_records

# (record key, what it is), in the figure's row order
QUANTITIES = ((ATTN_LOGIT, "largest attention logit"), (LAYER_RMS, "layer output RMS"),
              (ABS_LOG_Z, "mean |log Z| of the output logits"))  # fmt: skip
OUTPUT = "output"  # the line of the one quantity that is not per layer


def read_diagnostics(path) -> List[dict]:
    """The records of a diagnostics file, sorted by update, the last record of each update kept (a resumed run's)."""
    return read_update_records(path, "diagnostics")


def values_of(record: dict, quantity: str) -> Dict[str, float]:
    """{layer key, or "output" for |log Z|: value} of one record."""
    value = record[quantity]
    return dict(value) if isinstance(value, dict) else {OUTPUT: value}


def curves(records: List[dict], quantity: str) -> Dict[str, Dict[int, float]]:
    """{layer key (or "output"): {update: value}} over a run's records."""
    lines: Dict[str, Dict[int, float]] = {}
    for record in records:
        for line, value in values_of(record, quantity).items():
            lines.setdefault(line, {})[record["update"]] = value
    return lines


def last_common_update(seeds: List[List[dict]]) -> int:
    """The last update every seed's file recorded."""
    common = set.intersection(*({r["update"] for r in records} for records in seeds))
    if not common:
        raise ValueError("the seeds' diagnostics files share no update")
    return max(common)


def final_values(seeds: List[List[dict]]) -> tuple:
    """(update, {quantity: {line: [value of each seed]}}) at the last update every seed recorded."""
    update = last_common_update(seeds)
    at = [next(r for r in records if r["update"] == update) for records in seeds]
    return update, {quantity: {line: [values_of(r, quantity)[line] for r in at] for line in values_of(at[0], quantity)}
                    for quantity, _ in QUANTITIES}  # fmt: skip
