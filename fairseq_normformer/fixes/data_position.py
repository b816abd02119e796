"""The data position in global units: a run continues mid-epoch on another number of ranks.

fairseq shuffles the epoch's batches into one list and deals it out: rank r of N takes batches
r, r + N, r + 2N, ... Its iterator state counts the batches *one rank* took (``iterations_in_epoch``
k), and a resume skips k batches of each rank's share. After N -> M ranks that skips k·M batches of
the list where k·N were consumed: batches are trained twice (M < N) or never (M > N), without a word.

Here the state also records the world size and G = k·N, the batches of the list consumed
(``num_shards``, ``global_batches_in_epoch``). A resume on M ranks deals out the rest of the list,
batches G, G + 1, ..., in turn: rank r takes G + r, G + r + M, ... When M divides G that is
fairseq's own resume (skip G/M of each rank's share); otherwise each rank's share is dealt from the
list shifted by G mod M, then G // M of it skipped. Either way every batch of the epoch is trained
once. Counting batches, not updates, keeps ``--update-freq`` out of it: 1 rank with ``--update-freq 2``
and 2 ranks with ``--update-freq 1`` both consume 2 batches an update.
"""
import logging

import numpy as np
from fairseq.data import data_utils
from fairseq.data.iterators import EpochBatchIterator, ShardedIterator

from ..checks import BadInput

logger = logging.getLogger(__name__)

_fairseq_state_dict = EpochBatchIterator.state_dict
_fairseq_load_state_dict = EpochBatchIterator.load_state_dict
_fairseq_ordered_batches = EpochBatchIterator.ordered_batches


def shift_of(iterator, epoch: int) -> int:
    """G mod M for the epoch a resume shifted (``_resumed_shift``), 0 for every other epoch."""
    resumed_epoch, shift = getattr(iterator, "_resumed_shift", (None, 0))
    return shift if epoch == resumed_epoch else 0


def state_dict(self):
    """fairseq's state, plus the world size and the batches of the epoch's list consumed."""
    state = _fairseq_state_dict(self)
    consumed = shift_of(self, state["epoch"]) + self.num_shards * state["iterations_in_epoch"]
    return {**state, "num_shards": self.num_shards, "global_batches_in_epoch": consumed}


def consumed_batches(self, state) -> int:
    """G of a saved state; a state fairseq saved (without it) was saved by this many ranks."""
    if "global_batches_in_epoch" in state:
        return state["global_batches_in_epoch"]
    return state.get("iterations_in_epoch", 0) * self.num_shards


def load_state_dict(self, state):
    consumed = consumed_batches(self, state)
    saved_by = state.get("num_shards", self.num_shards)
    if consumed and saved_by != self.num_shards:
        if self.grouped_shuffling:
            raise BadInput(
                f"--grouped-shuffling orders an epoch's batches by the number of ranks: this checkpoint, saved "
                f"mid-epoch by {saved_by} ranks, continues on {saved_by} ranks only (or use one saved at an epoch's end)"
            )
        logger.info(f"data position: {consumed} batches of epoch {state['epoch']} consumed by {saved_by} ranks; "
                    f"the rest is dealt out to {self.num_shards}")  # fmt: skip
    offset, shift = divmod(consumed, self.num_shards)
    self._resumed_shift = (state["epoch"], shift)
    if not shift:
        return _fairseq_load_state_dict(self, {**state, "iterations_in_epoch": offset})
    self.epoch = state["epoch"]
    self._next_epoch_itr = self._get_iterator_for_epoch(self.epoch, shuffle=state.get("shuffle", True), offset=offset)


def ordered_batches(self, epoch, fix_batches_to_gpus, shuffle):
    """This rank's share of the epoch's batches; on a shifted epoch, dealt from the list without its
    first G mod M batches (fairseq's shuffle, then its ShardedIterator)."""
    shift = shift_of(self, epoch)
    if not shift:
        return _fairseq_ordered_batches(self, epoch, fix_batches_to_gpus, shuffle)
    batches = list(self.frozen_batches)
    if shuffle:
        with data_utils.numpy_seed(self.seed + epoch):
            np.random.shuffle(batches)
    batches = list(ShardedIterator(batches[shift:], self.num_shards, self.shard_id, fill_value=[]))
    if self._supports_prefetch:
        self.dataset.prefetch([i for batch in batches for i in batch])
    return batches
