"""Normalization schemes and the fused FFN LN (issue 41): the forward+backward step of each scheme of
``NORM_SCHEME_VARIANTS`` at the recipes' ``small`` shape, all in one process, interleaved rounds, against
Pre-LN. The dictionary is made-up symbols (the step's cost depends on its size, not on its pieces)."""
from pathlib import Path

from .measure import Step, clocked, time_interleaved
from .variants import NORM_SCHEME_VARIANTS, SMALL, SMALL_VOCAB, build_unchecked


def made_up_dictionary(workdir: Path, size: int = SMALL_VOCAB) -> Path:
    """A directory whose dict.txt has ``size`` symbols (fairseq adds its 4 specials)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "dict.txt").write_text("".join(f"madeupword{i:05d} 1\n" for i in range(size)))
    return workdir


def measure_norm_schemes(workdir: Path, rounds: int) -> dict:
    """Per variant: parameters, the first step (torch.compile's compilation included), the seconds of one
    step in each of ``rounds`` interleaved rounds by clock, and the peak tensor memory of a step."""
    data = made_up_dictionary(workdir)
    steps = {v.name: Step(build_unchecked(v, SMALL, data), SMALL, "cpu") for v in NORM_SCHEME_VARIANTS}
    first = {name: clocked(step, 1, "cpu") for name, step in steps.items()}
    seconds = time_interleaved(steps, SMALL.steps_per_timing, rounds)
    return {
        "vocab": len(next(iter(steps.values())).model.decoder.dictionary),
        "variants": {v.name: {"label": v.label, "purpose": v.purpose, "flags": list(v.flags),
                              "params": sum(p.numel() for p in steps[v.name].model.parameters()),
                              "first_step_seconds": first[v.name], "seconds_per_step": seconds[v.name],
                              "peak_bytes": steps[v.name].peak_bytes()}
                     for v in NORM_SCHEME_VARIANTS},
    }  # fmt: skip
