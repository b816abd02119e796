"""inverse_sqrt_any_warmup: Xiong et al.'s lr / sqrt(update) or lr / sqrt(epoch) without warmup, fairseq's
inverse_sqrt with it."""
import pytest
import torch
from fairseq.optim import FairseqOptimizer
from omegaconf import OmegaConf
from fairseq.optim.lr_scheduler import build_lr_scheduler
from fairseq.optim.lr_scheduler.inverse_square_root_schedule import InverseSquareRootSchedule

import fairseq_normformer  # noqa: F401  (registers the scheduler)
from fairseq_normformer.schedulers import InverseSquareRootAnyWarmupSchedule

UPDATES = [0, 1, 2, 3, 10, 99, 100, 101, 4000, 12345]


class SGD(FairseqOptimizer):
    """fairseq's optimizer wrapper (its set_lr / get_lr) around torch's SGD."""

    def __init__(self):
        super().__init__(cfg=None)
        self._optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def schedule(name, lr=(1e-3,), **settings):
    """(scheduler, optimizer) as fairseq builds them from ``--lr-scheduler name`` and its settings."""
    optimizer = SGD()
    return build_lr_scheduler(OmegaConf.create({"_name": name, "lr": list(lr), **settings}), optimizer), optimizer


def test_without_warmup_lr_over_sqrt_update():
    scheduler, optimizer = schedule("inverse_sqrt_any_warmup", lr=[5e-4], warmup_updates=0)
    assert isinstance(scheduler, InverseSquareRootAnyWarmupSchedule) and optimizer.get_lr() == 5e-4
    for t in UPDATES:
        assert scheduler.step_update(t) == pytest.approx(5e-4 / max(1, t) ** 0.5, rel=1e-12)
        assert optimizer.get_lr() == scheduler.lr


def test_decay_per_epoch_keeps_lr_through_each_epoch():
    scheduler, optimizer = schedule("inverse_sqrt_any_warmup", lr=[5e-4], warmup_updates=0, decay_per="epoch")
    assert optimizer.get_lr() == 5e-4
    updates = iter(range(1, 1000))
    for epoch in (1, 2, 3, 4):
        assert scheduler.step_begin_epoch(epoch) == pytest.approx(5e-4 / epoch**0.5, rel=1e-12)
        for t in [next(updates) for _ in range(50)]:  # 50 updates an epoch
            assert scheduler.step_update(t) == optimizer.get_lr() == pytest.approx(5e-4 / epoch**0.5, rel=1e-12)
        scheduler.step(epoch)  # end of epoch (fairseq's trainer.lr_step): no change
        assert optimizer.get_lr() == pytest.approx(5e-4 / epoch**0.5, rel=1e-12)


def test_with_warmup_equals_fairseq_inverse_sqrt_and_its_formula():
    settings = {"lr": [1e-3], "warmup_updates": 100, "warmup_init_lr": 1e-7}
    ours, _ = schedule("inverse_sqrt_any_warmup", **settings)
    fairseq, _ = schedule("inverse_sqrt", **settings)
    assert type(fairseq) is InverseSquareRootSchedule
    for t in UPDATES:
        formula = 1e-7 + t * (1e-3 - 1e-7) / 100 if t < 100 else 1e-3 * (100 / t) ** 0.5
        assert ours.step_update(t) == fairseq.step_update(t) == pytest.approx(formula, rel=1e-12)


def test_fairseq_inverse_sqrt_fails_without_warmup_and_bad_values_are_named():
    with pytest.raises(ZeroDivisionError):
        schedule("inverse_sqrt", warmup_updates=0)
    with pytest.raises(ValueError, match="--warmup-updates must be 0 or more, got -5"):
        schedule("inverse_sqrt_any_warmup", warmup_updates=-5)
    with pytest.raises(ValueError, match="takes one --lr"):
        schedule("inverse_sqrt_any_warmup", lr=[1e-3, 1e-4], warmup_updates=0)
    with pytest.raises(ValueError, match="--decay-per epoch needs --warmup-updates 0"):
        schedule("inverse_sqrt_any_warmup", warmup_updates=100, decay_per="epoch")
