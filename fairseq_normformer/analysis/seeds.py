"""Statistics over seeds (docs/analysis.md, "Seeds"): the recipes train every model once per seed
(SEEDS=N), the tables report each number as mean ± standard deviation over the seeds, and a model's
difference to the baseline as a 95% Student-t interval of the per-seed differences (paired by seed:
seed k of the model minus seed k of the baseline). An interval that contains 0 is "within seed noise".
"""
import math
import statistics
from dataclasses import dataclass
from typing import List, Optional, Sequence

from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    seeds: int

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def mean_std(values: Sequence[float]) -> tuple:
    """(mean, sample standard deviation; None for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Optional[Interval]:
    """The Student-t confidence interval of the mean of ``values``; None for one value."""
    if len(values) < 2:
        return None
    mean, std = mean_std(values)
    half = stats.t.ppf((1 + confidence) / 2, len(values) - 1) * std / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def paired_differences(candidate: Sequence[float], baseline: Sequence[float], what: str = "runs") -> List[float]:
    """Seed k of ``candidate`` minus seed k of ``baseline``."""
    if len(candidate) != len(baseline):
        raise ValueError(f"{what} are paired by seed, but one has {len(candidate)} seeds and the other {len(baseline)}")
    return [c - b for c, b in zip(candidate, baseline)]
