"""recipes/lambert_mnli.sh at a tiny size: fairseq-train --arch lambert_tiny with MLM + NSP (short phase
in epoch 1) logs both accuracies, and its checkpoint fine-tunes through fairseq's sentence_prediction
(the SameDoc pair task in place of MNLI, recipes/table2_glue.sh)."""
import sys

import pytest

from ..conftest import REPO_ROOT
from .test_mlm_e2e import BASH, load_recipe, run_script, valid_stats

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)


def test_lambert_pretrains_with_mlm_and_nsp_and_fine_tunes(tiny_bert_corpus, tmp_path):
    glue_dir, out = tmp_path / "glue", tmp_path / "lambert"
    load_recipe("sentence_prediction_data").main(
        ["same-document", str(tiny_bert_corpus.raw_dir), "--out", str(glue_dir / "SameDoc"), "--pairs", "100"]
    )
    env = dict(
        PY=sys.executable, DATA_BIN=tiny_bert_corpus.data_bin, SPM_MODEL=tiny_bert_corpus.spm_model,
        GLUE_DIR=glue_dir, OUT=out, ARCH="lambert_tiny", MODEL_FLAGS="--encoder-embed-dim 32 --encoder-ffn-embed-dim 64",
        MAX_UPDATE=4, MAX_EPOCH=2, SHORT_PHASE_EPOCHS=1, BATCH=16, WARMUP=1, FP16_FLAGS="",
        EXTRA_FLAGS="--num-workers 0 --cpu --log-interval 1", TASKS="SameDoc", LRS="1e-3", TOTAL_UPDATES=3,
        WARMUP_UPDATES=1,
    )  # fmt: skip
    stdout = run_script([BASH, REPO_ROOT / "recipes" / "lambert_mnli.sh"], env).stdout

    pretrain = (out / "pretrain" / "train.log").read_text()
    assert "LambertModel" in pretrain and "negatives: same-document" in pretrain
    assert "train, epoch 1: pairs of at most 6 segments of 23 tokens" in pretrain
    assert "valid, epoch 1: pairs of at most 23 segments of 23 tokens" in pretrain
    assert "mlm_accuracy=" in pretrain and "nsp_accuracy=" in pretrain  # training lines
    stats = valid_stats(pretrain)
    assert 0 <= float(stats["mlm_accuracy"]) <= 100 and 0 <= float(stats["nsp_accuracy"]) <= 100

    finetune = (out / "finetune" / "runs" / "SameDoc" / "lr1e-3" / "train.log").read_text()
    assert f"Loaded checkpoint {out}/pretrain/checkpoint_last.pt" in finetune
    assert "initialised from the pre-trained pooler" in finetune and "--max-positions 509" in (
        out / "finetune" / "commands.sh").read_text()
    assert 0 <= float(valid_stats(finetune)["accuracy"]) <= 100
    assert "| SameDoc | accuracy |" in stdout
