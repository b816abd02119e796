"""``--lr-scheduler inverse_sqrt_any_warmup``: fairseq's ``inverse_sqrt`` that also runs with
``--warmup-updates 0``, for Xiong et al.'s warmup-free Pre-LN runs ("On Layer Normalization in the
Transformer Architecture", 2020, Sec. 4: lr_t = lr_max / sqrt(t)).

fairseq's ``inverse_sqrt`` divides by ``--warmup-updates`` (ZeroDivisionError at 0), and its decay
factor lr·sqrt(warmup) would be 0 anyway. Without warmup this schedule starts at ``--lr`` and decays
as lr / sqrt(max(1, update)); with warmup it is fairseq's schedule, unchanged.
"""
from collections.abc import Collection

from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
    InverseSquareRootLRScheduleConfig,
    InverseSquareRootSchedule,
)


@register_lr_scheduler("inverse_sqrt_any_warmup", dataclass=InverseSquareRootLRScheduleConfig)
class InverseSquareRootAnyWarmupSchedule(InverseSquareRootSchedule):
    def __init__(self, cfg: InverseSquareRootLRScheduleConfig, optimizer):
        if cfg.warmup_updates > 0:
            super().__init__(cfg, optimizer)
            return
        if cfg.warmup_updates < 0:
            raise ValueError(f"--warmup-updates must be 0 or more, got {cfg.warmup_updates}")
        FairseqLRScheduler.__init__(self, cfg, optimizer)
        if isinstance(cfg.lr, Collection) and len(cfg.lr) > 1:
            raise ValueError("inverse_sqrt_any_warmup takes one --lr, not one per epoch")
        self.decay_factor = self.lr = cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr
        self.optimizer.set_lr(self.lr)

    def step_update(self, num_updates):
        if self.cfg.warmup_updates > 0:
            return super().step_update(num_updates)
        self.lr = self.decay_factor * max(1, num_updates) ** -0.5
        self.optimizer.set_lr(self.lr)
        return self.lr
