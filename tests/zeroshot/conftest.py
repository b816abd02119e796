"""A real checkpoint (fairseq-train on the tiny standard-library corpus) and task files in the five
public formats built from the corpus' held-out text."""
import pytest
import torch

from fairseq_normformer.zeroshot.scorer import load_scorer
from fairseq_normformer.zeroshot.stdlib_tasks import build_stdlib_tasks
from tests.conftest import USER_DIR, built_once, run_cli

MAX_POSITIONS = 96  # short, so long contexts are truncated and rolling scores need several windows


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: one thread is as fast, and far faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_lm_corpus, tmp_path_factory):
    """NormFormer LM, 2 layers of width 32, 30 updates. Dropout is on in training, so scoring
    in train mode would be random and the reference comparisons would fail."""
    def run(save_dir):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OMP_NUM_THREADS", "1")
            train(tiny_lm_corpus, save_dir)
        return save_dir / "checkpoint_last.pt"

    return built_once(tmp_path_factory, "zeroshot_ckpt", run)


def train(corpus, save_dir):
    run_cli([
        "fairseq-train", corpus.data_bin, "--user-dir", USER_DIR, "--task", "language_modeling",
        "--arch", "normformer_lm", "--scale-attn", "--scale-fc", "--scale-heads",
        "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
        "--decoder-attention-heads", "4", "--dropout", "0.1", "--share-decoder-input-output-embed",
        "--tokens-per-sample", MAX_POSITIONS, "--batch-size", "16", "--max-update", "30",
        "--optimizer", "adam", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5",
        "--num-workers", "0", "--save-dir", save_dir, "--no-epoch-checkpoints", "--disable-validation",
        "--cpu", "--seed", "1", "--log-format", "simple",
    ])  # fmt: skip


@pytest.fixture(scope="session")
def scorer(tiny_checkpoint, tiny_lm_corpus):
    # max_tokens of two sequences: batches are small, so padding and batch boundaries are exercised
    return load_scorer(tiny_checkpoint, tiny_lm_corpus.spm_model, max_tokens=2 * MAX_POSITIONS)


@pytest.fixture(scope="session")
def task_files(tiny_lm_corpus, tmp_path_factory):
    """{task: path} of 12 examples per task from the held-out (test and valid) text."""
    out = tmp_path_factory.mktemp("zeroshot_tasks")
    raw = out / "heldout.txt"
    raw.write_text("".join((tiny_lm_corpus.raw_dir / f"{split}.txt").read_text() for split in ("test", "valid")))
    return build_stdlib_tasks(raw, out / "tasks", examples=12, seed=0)
