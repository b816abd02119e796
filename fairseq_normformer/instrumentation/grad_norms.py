"""Average L1 norm of each parameter's gradient (Figs. 3 and 5), recorded during ``fairseq-train``.

The gradient is taken where fairseq's Trainer calls ``task.optimizer_step``: after gradient
accumulation and the all-reduce, divided by the sample size (the gradient of the mean loss per
token), unscaled from fp16 (fairseq's fp16 optimizers keep the pending factor in
``optimizer._multiply_factor``), and after ``--clip-norm`` (fairseq's default 0 clips nothing;
clipping scales every parameter alike, so the ratios of Fig. 5 do not depend on it).

File format, JSON Lines, one record per recorded update::

    {"update": 10, "lr": 0.0006, "grad_l1": {"layers.0.fc2.weight": 1.2e-05, ...}}

The file is appended to, so that a resumed run continues it; ``analysis.grad_curves.read_grad_norms`` keeps the last
record of each update.
"""
import json
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

import torch
import torch.distributed as dist
from fairseq.logging import metrics
from torch import Tensor

from .param_groups import param_group

METRIC_PREFIX = "grad_l1/"  # training log / tensorboard name: grad_l1/layers.0.fc2.weight


def mean_abs_grads(named_parameters: Iterable[Tuple[str, Tensor]], grad_scale=1.0) -> Dict[str, float]:
    """{group key: mean |g|} over the parameters that have a gradient, in one device sync.
    ``grad_scale`` multiplies the stored gradients (an fp16 optimizer's pending unscale factor)."""
    means: Dict[str, Tensor] = {}
    for name, param in named_parameters:
        if param.grad is None:
            continue
        if "flat_param" in name:
            raise ValueError(f"{name}: per-parameter gradient norms need unflattened parameters; "
                             "use --ddp-backend pytorch_ddp (or legacy_ddp), not fully_sharded")  # fmt: skip
        key = param_group(name).key
        if key in means:
            raise ValueError(f"two parameters map to the group {key!r} (the second is {name}): "
                             "the model has more than one stack of layers")  # fmt: skip
        means[key] = param.grad.detach().float().abs().mean()
    if not means:
        return {}
    device = next(iter(means.values())).device
    scaled = torch.stack([m.to(device) for m in means.values()]) * grad_scale
    return dict(zip(means, scaled.tolist()))


def pending_grad_scale(optimizer) -> float:
    """The factor fairseq's fp16 optimizers have yet to apply to the stored gradients (1 otherwise)."""
    scale = getattr(optimizer, "_multiply_factor", 1.0)
    return float(scale) if torch.is_tensor(scale) else scale


def is_first_rank() -> bool:
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


class GradNormRecorder:
    """Every ``interval`` updates: log each group's mean |g| through fairseq's metrics (training
    log and ``--tensorboard-logdir``) and append a record to ``path`` (when given, first rank only)."""

    def __init__(self, interval: int, path: Optional[str] = None):
        if interval < 1:
            raise ValueError(f"--grad-norm-interval must be at least 1 to record, got {interval}")
        self.interval, self.path = interval, path
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def step(self, model, optimizer, update: int):
        """Called once per update, before the optimizer applies the gradients."""
        drop_stale_meters(METRIC_PREFIX)
        if update % self.interval == 0:
            self.record(model, optimizer, update)

    def record(self, model, optimizer, update: int):
        norms = mean_abs_grads(model.named_parameters(), pending_grad_scale(optimizer))
        for key, value in norms.items():
            metrics.log_scalar(METRIC_PREFIX + key, value, priority=10000)
        if self.path is not None and is_first_rank():
            line = json.dumps({"update": update, "lr": optimizer.get_lr(), "grad_l1": norms})
            with open(self.path, "a") as f:
                f.write(line + "\n")


def drop_stale_meters(prefix: str):
    """fairseq keeps a meter once logged and prints it as null after each reset of the interval's
    aggregator; drop ours that have had no value since, so log lines between records stay clean."""
    for aggregator in metrics.get_active_aggregators():
        stale = {k for k, meter in aggregator.items() if k.startswith(prefix) and getattr(meter, "count", 1) == 0}
        if stale:
            for key in stale:
                del aggregator[key]
            aggregator.priorities = [p for p in aggregator.priorities if p[2] not in stale]  # MetersDict's order
