"""``--lr-scheduler inverse_sqrt_any_warmup``: fairseq's ``inverse_sqrt`` that also runs with
``--warmup-updates 0``, for Xiong et al.'s warmup-free runs ("On Layer Normalization in the
Transformer Architecture", 2020, Sec. 4.1).

fairseq's ``inverse_sqrt`` divides by ``--warmup-updates`` (ZeroDivisionError at 0), and its decay
factor lr·sqrt(warmup) would be 0 anyway. Without warmup this schedule starts at ``--lr`` and decays
as lr / sqrt(max(1, update)) (``--decay-per update``) or, our reading of Xiong et al. Sec. 4.1, keeps
``--lr`` through the first epoch and then lr / sqrt(epoch) (``--decay-per epoch``); with warmup it is
fairseq's schedule, unchanged.
"""
from collections.abc import Collection
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from fairseq.optim.lr_scheduler.inverse_square_root_schedule import (
    InverseSquareRootLRScheduleConfig,
    InverseSquareRootSchedule,
)


@dataclass
class InverseSquareRootAnyWarmupConfig(InverseSquareRootLRScheduleConfig):
    decay_per: ChoiceEnum(["update", "epoch"]) = field(
        default="update",
        metadata={"help": "without warmup: lr / sqrt(update), or lr / sqrt(epoch) (Xiong et al. Sec. 4.1)"},
    )


@register_lr_scheduler("inverse_sqrt_any_warmup", dataclass=InverseSquareRootAnyWarmupConfig)
class InverseSquareRootAnyWarmupSchedule(InverseSquareRootSchedule):
    def __init__(self, cfg: InverseSquareRootAnyWarmupConfig, optimizer):
        if cfg.warmup_updates > 0 and cfg.decay_per == "epoch":
            raise ValueError("--decay-per epoch needs --warmup-updates 0 (with warmup the decay is per update)")
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

    def step_begin_epoch(self, epoch):
        """--decay-per epoch: lr / sqrt(epoch) for the whole epoch (epochs count from 1)."""
        if self.cfg.warmup_updates == 0 and self.cfg.decay_per == "epoch":
            self._set_lr(max(1, epoch))
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        if self.cfg.warmup_updates > 0:
            return super().step_update(num_updates)
        if self.cfg.decay_per == "update":
            self._set_lr(max(1, num_updates))
        return self.lr

    def _set_lr(self, t):
        self.lr = self.decay_factor * t**-0.5
        self.optimizer.set_lr(self.lr)
