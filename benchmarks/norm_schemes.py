"""Normalization schemes and the fused FFN LN (issue 41): the forward+backward step of each scheme of
``NORM_SCHEME_VARIANTS`` at the recipes' ``small`` shape, all in one process, interleaved rounds, against
Pre-LN. The dictionary is made-up symbols (the step's cost depends on its size, not on its pieces)."""
from pathlib import Path

import torch

from .measure import Step, clocked, time_interleaved
from .variants import NORM_SCHEME_VARIANTS, SMALL, SMALL_VOCAB, build_unchecked

COMPILED_SUFFIX = "_compiled"


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
    variants = {v.name: {"label": v.label, "purpose": v.purpose, "flags": list(v.flags),
                         "params": sum(p.numel() for p in steps[v.name].model.parameters()),
                         "first_step_seconds": first[v.name], "seconds_per_step": seconds[v.name],
                         "peak_bytes": steps[v.name].peak_bytes()}
                for v in NORM_SCHEME_VARIANTS}  # fmt: skip
    return {
        "vocab": len(next(iter(steps.values())).model.decoder.dictionary),
        "variants": variants,  # before the check below, which loads other weights and turns dropout off
        "compiled_against_eager": {name: compiled_against_eager(steps[name.removesuffix(COMPILED_SUFFIX)], step)
                                   for name, step in steps.items() if name.endswith(COMPILED_SUFFIX)},
    }


def compiled_against_eager(eager: Step, compiled: Step) -> dict:
    """Inductor's numbers against eager's: the compiled model given the eager one's weights, both without
    dropout, on the same batch: the two losses; the gradients' difference over all parameters, as the ratio of
    L2 norms and as the largest absolute difference against the largest gradient, with the parameter where
    it is. Run after the timing (it changes the compiled model's weights)."""
    compiled.model.load_state_dict(eager.model.state_dict())
    losses = []
    for step in (eager, compiled):
        step.model.eval()
        losses.append(step().item())
    names = [name for name, _ in eager.model.named_parameters()]
    grads = [[p.grad.flatten() for p in step.model.parameters()] for step in (eager, compiled)]
    worst = [(a - b).abs().max().item() for a, b in zip(*grads)]
    eager_all, compiled_all = (torch.cat(g) for g in grads)
    return {"eager_loss": losses[0], "compiled_loss": losses[1],
            "relative_l2_grad_difference": ((eager_all - compiled_all).norm() / eager_all.norm()).item(),
            "max_abs_grad_difference": max(worst), "max_abs_grad": eager_all.abs().max().item(),
            "parameter": names[worst.index(max(worst))]}  # fmt: skip
