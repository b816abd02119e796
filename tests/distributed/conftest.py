"""The 1-process --update-freq 2 references that the data-parallel, resumed, restarted, fully sharded and
moved runs of several test files are compared with: each trained once per test process."""
import pytest

from .fairseq_runs import NO_DROPOUT, UPDATES, one_process_run, tiny_bert_args, tiny_lm_args


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
