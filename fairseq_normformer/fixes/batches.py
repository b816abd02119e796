"""Evaluation covers every example: fairseq's ``batch_by_size`` drops a last batch whose size is not a
multiple of ``--required-batch-size-multiple`` (default 8), against its own docstring ("batch size
less than N or a multiple of N") and ``skip_remainder_batch=False``, which fairseq passes for
validation. fairseq-generate, fairseq-validate and validation (loss, ``--eval-bleu``) then score up to
7 examples fewer than the split holds, without a word. Here those examples become a last, smaller
batch, except while ``Trainer.get_train_iterator`` builds the training batches: training keeps
fairseq's batches exactly (``--skip-remainder-batch`` is fairseq's own switch for its last batch)."""
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
from fairseq.data import data_utils
from fairseq.trainer import Trainer

_fairseq_batch_by_size = data_utils.batch_by_size
_fairseq_get_train_iterator = Trainer.get_train_iterator
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


def get_train_iterator(self, *args, **kwargs):
    with training_batches():
        return _fairseq_get_train_iterator(self, *args, **kwargs)
