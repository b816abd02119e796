"""Evaluation covers every example: fairseq's ``batch_by_size`` drops a last batch whose size is not a
multiple of ``--required-batch-size-multiple`` (default 8), against its own docstring ("batch size
less than N or a multiple of N") and ``skip_remainder_batch=False``, which fairseq passes for
validation. fairseq-generate, fairseq-validate and validation (loss, ``--eval-bleu``) then score up to
7 examples fewer than the split holds, without a word. Here those examples become a last, smaller
batch, except while ``Trainer.get_train_iterator`` builds the training batches: training keeps
fairseq's batches exactly (``--skip-remainder-batch`` is fairseq's own switch for its last batch).

Resuming in a later epoch cuts the batches as the uninterrupted run did. fairseq's task cuts them
when it makes the iterator, ordering the examples with seed + epoch, and an uninterrupted run reuses
epoch 1's iterator in every epoch (unless its dataset cannot be reused, ``--update-epoch-batch-itr``
or the task's ``rebuild_batches``). A resume in epoch e > 1 made a new iterator cut with e: other
batches than the ones the saved position counts.

A finished run, resumed (a requeued job, torchrun restarting a group whose last update was saved),
trains no more: fairseq's train loop checks --max-update only after an update, so the same command
again trained update N + 1 and saved it over checkpoint_last."""
import logging
import math
from contextlib import contextmanager
from contextvars import ContextVar

import fairseq_cli.train as fairseq_train
import numpy as np
from fairseq.data import data_utils
from fairseq.trainer import Trainer

logger = logging.getLogger(__name__)

_fairseq_batch_by_size = data_utils.batch_by_size
_fairseq_get_train_iterator = Trainer.get_train_iterator
_fairseq_train = fairseq_train.train
_building_training_batches = ContextVar("building_training_batches", default=False)


@contextmanager
def training_batches():
    """Within it, batch_by_size is fairseq's, remainder rule included."""
    token = _building_training_batches.set(True)
    try:
        yield
    finally:
        _building_training_batches.reset(token)


def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None, max_sentences=None,
                  required_batch_size_multiple=1, fixed_shapes=None):  # fmt: skip
    """fairseq's batches (consecutive runs of ``indices``), plus the ones it dropped as a last batch."""
    indices = indices if isinstance(indices, np.ndarray) else np.fromiter(indices, dtype=np.int64)
    batches = _fairseq_batch_by_size(indices, num_tokens_fn, num_tokens_vec, max_tokens, max_sentences,
                                     required_batch_size_multiple, fixed_shapes)  # fmt: skip
    batched = sum(len(batch) for batch in batches)
    if _building_training_batches.get() or fixed_shapes is not None or batched == len(indices):
        return batches
    return list(batches) + [indices[batched:]]


def reuses_first_epoch_batches(trainer, disable_iterator_cache: bool) -> bool:
    """Whether the task keeps epoch 1's iterator (and its batches) for every epoch of a run."""
    task, dataset = trainer.task, trainer.task.dataset(trainer.cfg.dataset.train_subset)
    rebuilt = getattr(getattr(task, "cfg", None), "rebuild_batches", False) or trainer.cfg.dataset.update_epoch_batch_itr
    return not (disable_iterator_cache or rebuilt) and task.can_reuse_epoch_itr(dataset)


def get_train_iterator(self, epoch, combine=True, load_dataset=True, data_selector=None, shard_batch_itr=True,
                       disable_iterator_cache=False):  # fmt: skip
    """fairseq's, with training's batches (above); a new iterator for epoch > 1 of a task that reuses
    its iterator is cut as epoch 1's, then set to ``epoch``."""
    if load_dataset:
        self.task.load_dataset(self.cfg.dataset.train_subset, epoch=epoch, combine=combine,
                               data_selector=data_selector, tpu=self.tpu)  # fmt: skip
    cut_in = 1 if reuses_first_epoch_batches(self, disable_iterator_cache) else epoch
    # (a task that cannot reuse its iterator may have an unhashable dataset: laser's, multilingual_translation's)
    new = cut_in != epoch and self.task.dataset(self.cfg.dataset.train_subset) not in self.task.dataset_to_epoch_iter
    with training_batches():
        iterator = _fairseq_get_train_iterator(self, cut_in, combine, False, data_selector, shard_batch_itr,
                                               disable_iterator_cache)  # fmt: skip
    if new:
        iterator.epoch = epoch
    return iterator


def train(cfg, trainer, task, epoch_itr):
    """fairseq's epoch of training, none once --max-update is reached (valid losses, should stop)."""
    max_update = cfg.optimization.max_update or math.inf
    if trainer.get_num_updates() >= max_update:
        logger.info(f"nothing to train: update {trainer.get_num_updates()} reached --max-update {max_update}")
        return [None], True
    return _fairseq_train(cfg, trainer, task, epoch_itr)
