"""Time-to-target (Fig. 2's star): the first validation at which a run (NormFormer) reaches the
baseline's final validation perplexity, as a fraction of the baseline's updates and wall time.
"NormFormer reaches the baseline's perplexity 24% faster" is a fraction of 0.76. Over seeds (one
baseline and one NormFormer run per seed, paired), the fraction's mean, std and 95% t-interval; an
interval that contains 1 (the baseline's own pace) is within seed noise. Validations are every few
updates, so a run's crossing lies after its last validation above the target (``previous_update``):
the fraction is an upper bound, its resolution the validation interval."""
from dataclasses import asdict, dataclass
from typing import List, Optional

from .seeds import mean_std, t_interval
from .training_log import TrainingLog


@dataclass
class TimeToTarget:
    target_ppl: float  # the baseline's final validation perplexity
    baseline_updates: int  # updates of the baseline's final validation
    baseline_wall: Optional[float]  # seconds, fairseq's `wall` at that validation
    hit_update: Optional[int] = None  # first validation of the other run with ppl <= target; None: never
    previous_update: Optional[int] = None  # the validation before it (0: the hit is the first): the crossing is after
    hit_wall: Optional[float] = None
    hit_ppl: Optional[float] = None

    @property
    def update_fraction(self) -> Optional[float]:
        return None if self.hit_update is None else self.hit_update / self.baseline_updates

    @property
    def previous_fraction(self) -> Optional[float]:
        return None if self.previous_update is None else self.previous_update / self.baseline_updates

    @property
    def wall_fraction(self) -> Optional[float]:
        if self.hit_wall is None or not self.baseline_wall:
            return None
        return self.hit_wall / self.baseline_wall

    def as_dict(self) -> dict:
        fractions = {"update_fraction": self.update_fraction, "previous_fraction": self.previous_fraction}
        return {**asdict(self), **fractions, "wall_fraction": self.wall_fraction}


def time_to_target(baseline: TrainingLog, candidate: TrainingLog, metric: str = "ppl") -> TimeToTarget:
    """metric: the validation perplexity to compare (a masked LM's is ``mlm_ppl``)."""
    target, baseline_updates = baseline.final_metric(metric), baseline.final_valid()["num_updates"]
    candidate.final_valid()  # a clear error when the other run has no validation either
    baseline_part = dict(target_ppl=target, baseline_updates=baseline_updates,
                         baseline_wall=baseline.wall_at(baseline_updates))  # fmt: skip
    k = next((k for k, r in enumerate(candidate.valid) if r.get(metric, float("inf")) <= target), None)
    if k is None:
        return TimeToTarget(**baseline_part)
    hit = candidate.valid[k]
    return TimeToTarget(
        **baseline_part,
        hit_update=hit["num_updates"],
        previous_update=candidate.valid[k - 1]["num_updates"] if k else 0,
        hit_wall=candidate.wall_at(hit["num_updates"]),
        hit_ppl=hit[metric],
    )


def fraction_summary(results: List[TimeToTarget]) -> dict:
    """The fraction of updates over the seeds: each seed's, their mean, std and 95% interval (None
    where undefined: a seed that never reaches its baseline's perplexity, one seed)."""
    fractions = [r.update_fraction for r in results]
    summary = {"per_seed": fractions, "mean": None, "std": None, "low": None, "high": None, "previous_mean": None}
    if None not in fractions:
        summary["previous_mean"] = mean_std([r.previous_fraction for r in results])[0]
        summary["mean"], summary["std"] = mean_std(fractions)
        interval = t_interval(fractions)
        if interval is not None:
            summary["low"], summary["high"] = interval.low, interval.high
    return summary
