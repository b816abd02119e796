"""Measurement options for ``fairseq-train``, as a task mixin: no fork of fairseq's trainer.

fairseq's Trainer calls ``task.train_step`` for each micro-batch (forward and backward) and
``task.optimizer_step`` once per update, after gradient accumulation, the all-reduce, the fp16
unscale factor is known and ``--clip-norm`` is applied. ``AnalysisTaskMixin`` overrides both:

  --grad-norm-interval N [--grad-norm-file F]     Figs. 3 and 5: mean |g| per parameter group
  --diagnostics-interval N [--diagnostics-file F] the largest attention logit and the output RMS per layer, the
                                                  output logits' mean |log Z| (Wortsman et al. 2023): diagnostics.py
  --activation-overflow-threshold T               Table 3: first operation with |activation| > T
      [--activation-overflow-file F] [--stop-on-activation-overflow]   or non-finite
  --data-order-file F                             the example ids of each training batch, by update and rank

The tasks registered with them (tasks/analysis.py): ``language_modeling_analysis`` and ``masked_lm_analysis`` (fairseq's tasks with
these options). Another task gains them by adding ``AnalysisOptions`` to its config's bases and
``AnalysisTaskMixin`` (first) to its class's bases.
"""
import json
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


from .activations import ActivationMonitor, Overflow
from .data_order import record_batch
from .diagnostics import DiagnosticsRecorder, check_diagnosable
from .grad_norms import GradNormRecorder

logger = logging.getLogger(__name__)


class ActivationOverflowError(FloatingPointError):
    """Raised by --stop-on-activation-overflow: the run is as good as diverged in fp16."""


@dataclass
class AnalysisOptions:
    grad_norm_interval: int = field(
        default=0,
        metadata={"help": "every N updates, log the average L1 norm of each parameter's gradient "
                  "(Figs. 3 and 5) to the training log and tensorboard; 0: off"},
    )  # fmt: skip
    grad_norm_file: Optional[str] = field(
        default=None, metadata={"help": "also append those norms to this JSON Lines file"}
    )
    diagnostics_interval: int = field(
        default=0,
        metadata={"help": "every N updates, log each layer's largest attention logit and output RMS and the output "
                  "logits' mean |log Z|, measured on that update's training batch, to the training log and "
                  "tensorboard; 0: off"},
    )  # fmt: skip
    diagnostics_file: Optional[str] = field(
        default=None, metadata={"help": "also append those diagnostics to this JSON Lines file"}
    )
    activation_overflow_threshold: float = field(
        default=0.0,
        metadata={"help": "watch each training forward pass for activations (attention logits "
                  "included) above this magnitude or non-finite, and report the first operation "
                  "and layer (Table 3); 65504 is the fp16 maximum; 0: off"},
    )  # fmt: skip
    activation_overflow_file: Optional[str] = field(
        default=None, metadata={"help": "append each overflow found to this JSON Lines file"}
    )
    stop_on_activation_overflow: bool = field(
        default=False,
        metadata={"help": "stop training at the first overflow (an fp32 run emulating fp16)"},
    )
    data_order_file: Optional[str] = field(
        default=None,
        metadata={"help": "append the example ids of each training batch, with its update and rank, to this "
                  "JSON Lines file (which examples a run saw, e.g. across a resume on another number of ranks)"},
    )  # fmt: skip


class AnalysisTaskMixin:
    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        _check_options(cfg)
        self.grad_norm_recorder = (
            GradNormRecorder(cfg.grad_norm_interval, cfg.grad_norm_file) if cfg.grad_norm_interval > 0 else None
        )
        self.diagnostics = (
            DiagnosticsRecorder(cfg.diagnostics_interval, cfg.diagnostics_file) if cfg.diagnostics_interval > 0 else None
        )
        self.overflow_threshold = cfg.activation_overflow_threshold or None
        self.overflow_file = cfg.activation_overflow_file
        self.stop_on_overflow = cfg.stop_on_activation_overflow
        self.data_order_file = cfg.data_order_file
        if self.overflow_file is not None:
            Path(self.overflow_file).parent.mkdir(parents=True, exist_ok=True)

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.diagnostics is not None:
            check_diagnosable(model)
        return model

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False, **kwargs):
        update = update_num + 1  # the update being made, as fairseq logs it (num_updates)
        if self.data_order_file is not None and not ignore_grad:  # ignore_grad: fairseq's dummy batch
            record_batch(self.data_order_file, update, sample["id"])
        with self._diagnosed(update, model, sample, ignore_grad):
            if self.overflow_threshold is None or ignore_grad:
                return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad, **kwargs)
            with ActivationMonitor(model, self.overflow_threshold) as monitor:
                result = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad, **kwargs)
        overflow = monitor.first_overflow()
        if overflow is not None:
            self._report_overflow(overflow, update, optimizer.get_lr())
        return result

    def _diagnosed(self, update: int, model, sample, ignore_grad: bool):
        """The diagnostics' hooks around the train_step of a recorded update (nothing else is hooked)."""
        if self.diagnostics is None or ignore_grad or not self.diagnostics.due(update):
            return nullcontext()
        return self.diagnostics.watch(update, model, sample["target"], self.target_dictionary.pad())

    def optimizer_step(self, optimizer, model, update_num):
        update = update_num + 1  # the update being made, as fairseq logs it (num_updates)
        if self.grad_norm_recorder is not None:
            self.grad_norm_recorder.step(model, optimizer, update)
        if self.diagnostics is not None:
            self.diagnostics.step(optimizer, update)
        super().optimizer_step(optimizer, model, update_num)

    def _report_overflow(self, overflow: Overflow, update: int, lr: float):
        message = f"activation overflow at update {update} (lr {lr:.6g}): first in {overflow.describe()}"
        logger.warning(message)
        if self.overflow_file is not None:
            record = {"update": update, "lr": lr, **vars(overflow), "threshold": self.overflow_threshold}
            with open(self.overflow_file, "a") as f:
                f.write(json.dumps(record) + "\n")
        if self.stop_on_overflow:
            raise ActivationOverflowError(message)


def _check_options(cfg):
    if cfg.grad_norm_interval < 0:
        raise ValueError(f"--grad-norm-interval must be >= 0, got {cfg.grad_norm_interval}")
    if cfg.grad_norm_file is not None and cfg.grad_norm_interval == 0:
        raise ValueError("--grad-norm-file needs --grad-norm-interval N (N >= 1)")
    if cfg.diagnostics_interval < 0:
        raise ValueError(f"--diagnostics-interval must be >= 0, got {cfg.diagnostics_interval}")
    if cfg.diagnostics_file is not None and cfg.diagnostics_interval == 0:
        raise ValueError("--diagnostics-file needs --diagnostics-interval N (N >= 1)")
    if cfg.activation_overflow_threshold < 0:
        raise ValueError(f"--activation-overflow-threshold must be >= 0, got {cfg.activation_overflow_threshold}")
    needs_threshold = cfg.activation_overflow_file is not None or cfg.stop_on_activation_overflow
    if needs_threshold and not cfg.activation_overflow_threshold:
        raise ValueError(
            "--activation-overflow-file and --stop-on-activation-overflow need --activation-overflow-threshold "
            "(e.g. 65504, the fp16 maximum)"
        )
