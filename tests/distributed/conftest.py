"""Runs that several test files read, each trained once per test process: the 1-process --update-freq 2
references that the data-parallel, resumed, restarted, fully sharded and moved runs are compared with,
and a fully sharded run that saves each rank's shard."""
import pytest

from .fairseq_runs import NO_DROPOUT, SHARDED, UPDATES, one_process_run, tiny_bert_args, tiny_lm_args, warning_free_run


@pytest.fixture(scope="session")
def lm_reference(tiny_lm_corpus, tmp_path_factory):
    """The tiny causal LM, dropout 0, a checkpoint at each of UPDATES updates (read only: copy to resume)."""
    save_dir = tmp_path_factory.mktemp("lm_one_process")
    return one_process_run(tiny_lm_args(tiny_lm_corpus.data_bin, save_dir, *NO_DROPOUT, "--max-update", UPDATES), save_dir)


@pytest.fixture(scope="session")
def bert_reference(tiny_bert_corpus, tmp_path_factory):
    """The tiny BERT (masked LM + next-sentence prediction), dropout 0, a checkpoint at each of UPDATES updates."""
    save_dir = tmp_path_factory.mktemp("bert_one_process")
    return one_process_run(tiny_bert_args(tiny_bert_corpus.data_bin, save_dir, *NO_DROPOUT, "--max-update", UPDATES), save_dir)


@pytest.fixture(scope="session")
def sharded_state_run(tiny_lm_corpus, tmp_path_factory):
    """2 FSDP processes, every layer wrapped (--checkpoint-activations), each rank saving its shard of every
    update's checkpoint (--use-sharded-state); dropout 0, UPDATES updates."""
    save_dir = tmp_path_factory.mktemp("layers_sharded_state")
    extra = [*NO_DROPOUT, "--max-update", UPDATES, *SHARDED, "--checkpoint-activations", "--use-sharded-state"]
    return warning_free_run(tiny_lm_args(tiny_lm_corpus.data_bin, save_dir, *extra), save_dir)
