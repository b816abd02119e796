"""A run continued on another number of processes (CPU, gloo). The data position is kept in global
units: fairseq-train resumed mid-epoch 2 -> 1 and 1 -> 2 ranks, and resumed in epoch 2, trains every
example of the epoch exactly once (counted with --data-order-file); fairseq's iterator resumed from
N on M ranks (any N, M <= 4, also where M does not divide the batches consumed) deals out each batch
of the epoch once. With the global batch kept (ranks x --update-freq), the continued DDP run follows
the uninterrupted 1-process --update-freq 2 run in losses and weights at every update."""
import collections
import json

import pytest
import torch
from fairseq.data.iterators import EpochBatchIterator

from fairseq_normformer.checks import BadInput

from .fairseq_runs import NO_DROPOUT, one_process_run, tiny_lm_args
from .fairseq_runs import train_one_rank_here as train
from .test_data_parallel import assert_same_checkpoints
from .test_resume_data_parallel import GLOO

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

TWO_RANKS = ["--distributed-world-size", "2", *GLOO]
UPDATES, STOPPED_AT = 4, 2  # compared with the reference; the runs go on to the end of the epoch
# The tiny corpus's 1821 blocks in batches of 32: 56 of 32 and one of 24 (fairseq drops the last 5: multiples of 8)
BATCHES_PER_EPOCH, EXAMPLES_PER_EPOCH = 57, 1816


def analysis_args(corpus, save_dir, *extra) -> list:
    """The tiny LM on language_modeling_analysis, recording each batch's example ids; 32 blocks a batch."""
    args = tiny_lm_args(corpus.data_bin, save_dir, *NO_DROPOUT, "--batch-size", "32",
                        "--data-order-file", save_dir / "order.jsonl", *extra)  # fmt: skip
    args[args.index("language_modeling")] = "language_modeling_analysis"
    return args


def trained_examples(save_dir, updates=range(1, 10**6)) -> collections.Counter:
    """How often each example id was trained at the given updates (by any rank, in any run)."""
    with open(save_dir / "order.jsonl") as f:
        batches = [json.loads(line) for line in f]
    return collections.Counter(i for batch in batches if batch["update"] in updates for i in batch["ids"])


def assert_each_example_once(examples: collections.Counter):
    assert len(examples) == EXAMPLES_PER_EPOCH and set(examples.values()) == {1}


@pytest.fixture(scope="module")
def reference(tiny_lm_corpus, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("one_process")
    return one_process_run(analysis_args(tiny_lm_corpus, save_dir, "--max-update", UPDATES), save_dir)


@pytest.mark.parametrize("first, then", [
    (TWO_RANKS, ["--update-freq", "2"]),
    (["--update-freq", "2"], TWO_RANKS),
], ids=["2->1", "1->2"])  # fmt: skip
def test_continued_on_another_number_of_ranks(first, then, reference, tiny_lm_corpus, tmp_path):
    """Stopped after 2 updates (4 batches) and continued to the end of the epoch: the uninterrupted
    run's losses and weights (Adam's state carries over as it is), and each example once. Before the
    fix, 2 -> 1 trained batches 2-3 twice and 1 -> 2 skipped batches 4-7."""
    train(analysis_args(tiny_lm_corpus, tmp_path, "--max-update", STOPPED_AT, *first))
    resumed = train(analysis_args(tiny_lm_corpus, tmp_path, "--max-epoch", "1", *then)).stdout
    assert f"@ {STOPPED_AT} updates)" in resumed and "4 batches of epoch 1 consumed by" in resumed
    assert_same_checkpoints(reference, tmp_path, UPDATES)
    assert_each_example_once(trained_examples(tmp_path))


def test_resumed_in_epoch_two_each_example_once(tiny_lm_corpus, tmp_path):
    """Stopped at update 70 (13 batches into epoch 2) and resumed: before the fix, epoch 2 trained
    330 examples twice and 330 never."""
    train(analysis_args(tiny_lm_corpus, tmp_path, "--max-update", "70", "--save-interval-updates", "0"))
    train(analysis_args(tiny_lm_corpus, tmp_path, "--max-epoch", "2", "--save-interval-updates", "0"))
    assert_each_example_once(trained_examples(tmp_path, range(BATCHES_PER_EPOCH + 1, 2 * BATCHES_PER_EPOCH + 1)))


class Numbers(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, index):
        return index


def rank_iterators(world_size: int, batches: int, **options) -> list:
    """fairseq's training iterator of each rank over ``batches`` one-example batches."""
    return [EpochBatchIterator(Numbers(), collate_fn=list, batch_sampler=[[i] for i in range(batches)], seed=3,
                               num_shards=world_size, shard_id=rank, **options) for rank in range(world_size)]  # fmt: skip


def train_ranks(iterators, state, updates=None) -> list:
    """Each rank resumes from ``state`` and takes ``updates`` batches (all: None); the batches taken."""
    taken = []
    for iterator in iterators:
        if state is not None:
            iterator.load_state_dict(state)
        epoch = iterator.next_epoch_itr(shuffle=True)
        taken += [i for batch in (epoch if updates is None else (next(epoch) for _ in range(updates))) for i in batch]
    return taken


@pytest.mark.parametrize("world_sizes", [(2, 1), (1, 2), (2, 3), (3, 2), (4, 3), (1, 3, 4), (3, 4, 2)])
@pytest.mark.parametrize("updates", [1, 2, 3])
def test_any_number_of_ranks_continues_the_epoch(world_sizes, updates):
    """A 23-batch epoch, ``updates`` per rank on each world size in turn, then to the end on the last:
    each batch once."""
    taken, state = [], None
    for world_size in world_sizes[:-1]:
        iterators = rank_iterators(world_size, 23)
        taken += train_ranks(iterators, state, updates)
        state = iterators[0].state_dict()
        assert state["num_shards"] == world_size
    taken += train_ranks(rank_iterators(world_sizes[-1], 23), state)
    assert sorted(taken) == list(range(23))


def test_grouped_shuffling_refuses_another_number_of_ranks_mid_epoch():
    """--grouped-shuffling shuffles groups of world-size batches: the epoch's order depends on it."""
    iterators = rank_iterators(2, 23, grouped_shuffling=True)
    train_ranks(iterators, None, 2)
    with pytest.raises(BadInput, match="saved mid-epoch by 2 ranks, continues on 2 ranks only"):
        rank_iterators(1, 23, grouped_shuffling=True)[0].load_state_dict(iterators[0].state_dict())
