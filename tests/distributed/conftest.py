"""Runs that several test files read, each trained once per test session: the 1-process --update-freq 2
references that the data-parallel, resumed, restarted, fully sharded and moved runs are compared with,
and a fully sharded run that saves each rank's shard."""
import pytest

from ..conftest import built_once
from .fairseq_runs import NO_DROPOUT, SHARDED, UPDATES, one_process_run, tiny_bert_args, tiny_lm_args, warning_free_run


@pytest.fixture(scope="session")
def lm_reference(tiny_lm_corpus, tmp_path_factory):
    """The tiny causal LM, dropout 0, a checkpoint at each of UPDATES updates (read only: copy to resume)."""
    args = lambda save_dir: tiny_lm_args(tiny_lm_corpus.data_bin, save_dir, *NO_DROPOUT, "--max-update", UPDATES)
    return built_once(tmp_path_factory, "lm_one_process", lambda save_dir: one_process_run(args(save_dir), save_dir))


@pytest.fixture(scope="session")
def bert_reference(tiny_bert_corpus, tmp_path_factory):
    """The tiny BERT (masked LM + next-sentence prediction), dropout 0, a checkpoint at each of UPDATES updates."""
    args = lambda save_dir: tiny_bert_args(tiny_bert_corpus.data_bin, save_dir, *NO_DROPOUT, "--max-update", UPDATES)
    return built_once(tmp_path_factory, "bert_one_process", lambda save_dir: one_process_run(args(save_dir), save_dir))


@pytest.fixture(scope="session")
def sharded_state_run(tiny_lm_corpus, tmp_path_factory):
    """2 FSDP processes, every layer wrapped (--checkpoint-activations), each rank saving its shard of every
    update's checkpoint (--use-sharded-state); dropout 0, UPDATES updates."""
    extra = [*NO_DROPOUT, "--max-update", UPDATES, *SHARDED, "--checkpoint-activations", "--use-sharded-state"]
    run = lambda save_dir: warning_free_run(tiny_lm_args(tiny_lm_corpus.data_bin, save_dir, *extra), save_dir)
    return built_once(tmp_path_factory, "layers_sharded_state", run)
