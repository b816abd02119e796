"""The masked-LM paths through the real CLIs: MLM+NSP pre-training with each negative strategy
(recipes/tiny_mlm_nsp.sh for `random`), fine-tuning a NormFormer checkpoint through fairseq's
sentence_prediction (recipes/table2_glue.sh on the SameDoc task built from the corpus), fairseq's
own masked_lm task with normformer_roberta, and normformer-export-hf into transformers (and its fill-mask pipeline)."""
import importlib.util
import os
import re
import shutil
import sys

import pytest
import sentencepiece as spm
import torch
import transformers
from fairseq import checkpoint_utils

from fairseq_normformer.analysis.diagnostics import read_diagnostics
from fairseq_normformer.analysis.grad_curves import read_grad_norms
from fairseq_normformer.cli import export_hf

from ..conftest import REPO_ROOT, TINY, TRAIN, USER_DIR, pretrain, run_cli, valid_stats
from ..distributed.fairseq_runs import RUN_ENV, forked_commands

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

BASH = shutil.which("bash")


def load_recipe(name):
    """A Python helper of recipes/, imported from its file (recipes/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(args, env: dict):
    """run_cli with extra environment variables (the recipes' settings); the Python programs the script starts by
    name, PY's included, forked (``forked_commands``)."""
    settings = {**RUN_ENV, **{key: str(value) for key, value in env.items()}}
    return run_cli(args, env=forked_commands({**os.environ, **settings}))


@pytest.fixture(scope="module")
def tiny_recipe(tiny_bert_corpus, tmp_path_factory):
    """recipes/tiny_mlm_nsp.sh at a tiny size, reusing the session's corpus (same settings)."""
    work = tmp_path_factory.mktemp("tiny_mlm_nsp")
    (work / "corpus").symlink_to(tiny_bert_corpus.raw_dir.parent)
    env = dict(PY=sys.executable, MAX_UPDATE=8, MAX_CHARS=200000, VOCAB_SIZE=1000, SIZE_FLAGS=" ".join(TINY))
    result = run_script([BASH, REPO_ROOT / "recipes" / "tiny_mlm_nsp.sh", work], env)
    return work, result.stdout


def test_tiny_recipe_trains_baseline_and_normformer_with_random_negatives(tiny_recipe):
    work, stdout = tiny_recipe
    table = [line for line in stdout.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in table[1:]] == ["| preln_bert_base", "| normformer_bert_base"]
    for arch in ("preln_bert_base", "normformer_bert_base"):
        log = (work / arch / "train.log").read_text()
        stats = valid_stats(log)
        assert {"mlm_loss", "mlm_ppl", "mlm_accuracy", "nsp_loss", "nsp_accuracy"} <= stats.keys()
        assert 0 <= float(stats["nsp_accuracy"]) <= 100 and float(stats["mlm_ppl"]) > 1
        assert "negatives: random" in log and "single-sentence documents" in log
        assert (work / arch / "checkpoint_last.pt").exists()


@pytest.mark.parametrize("negatives", ["same-document", "swap"])
def test_pretraining_with_each_negative_strategy_logs_mlm_and_nsp_accuracy(
    tiny_bert_corpus, tmp_path, request, negatives
):
    if negatives == "swap":
        stdout = request.getfixturevalue("swap_run")[1]
    else:
        grad_norms, diagnostics = tmp_path / "grad_norms.jsonl", tmp_path / "diagnostics.jsonl"  # mlm_nsp carries
        stdout = pretrain(tiny_bert_corpus.data_bin, tmp_path, "normformer_bert_base",  # the analysis options too
                          ["--nsp-negatives", negatives, "--mask-whole-words", "--no-save",
                           "--grad-norm-interval", "1", "--grad-norm-file", str(grad_norms),
                           "--diagnostics-interval", "2", "--diagnostics-file", str(diagnostics)])  # fmt: skip
        records = read_grad_norms(grad_norms)
        assert [r["update"] for r in records] == [1, 2, 3]
        assert any(".fc2." in name for name in records[0]["grad_l1"])
        [record] = read_diagnostics(diagnostics)
        assert record["update"] == 2 and set(record["layer_rms"]) == set(record["attn_logit"]) == {"layers.0", "layers.1"}
        logged = re.search(r"num_updates=2, .*abs_log_z=([\d.]+)", stdout)  # the masked tokens' logits
        assert float(logged.group(1)) == pytest.approx(record["abs_log_z"], rel=1e-4)
    assert f"negatives: {negatives}" in stdout
    assert "mlm_accuracy=" in stdout and "nsp_accuracy=" in stdout  # training lines
    stats = valid_stats(stdout)
    assert {"mlm_accuracy", "nsp_accuracy", "mlm_ppl"} <= stats.keys()


def test_normformer_checkpoint_fine_tunes_through_sentence_prediction(tiny_recipe, tiny_bert_corpus, tmp_path):
    work, _ = tiny_recipe
    glue_dir = tmp_path / "glue"
    sentence_prediction_data = load_recipe("sentence_prediction_data")
    sentence_prediction_data.main(["same-document", str(tiny_bert_corpus.raw_dir), "--out", str(glue_dir / "SameDoc"),
                                   "--pairs", "200"])  # fmt: skip
    env = dict(
        PY=sys.executable, CHECKPOINT=str(work / "normformer_bert_base" / "checkpoint_last.pt"),
        ARCH="normformer_bert_base", MODEL_FLAGS=" ".join(TINY), DATA_BIN=str(tiny_bert_corpus.data_bin),
        SPM_MODEL=str(tiny_bert_corpus.spm_model), GLUE_DIR=str(glue_dir), OUT=str(tmp_path / "table2"),
        TASKS="SameDoc", LRS="1e-3", FP16_FLAGS="", TOTAL_UPDATES="6", WARMUP_UPDATES="1", MAX_POSITIONS="128",
        EXTRA_FLAGS="--num-workers 0 --cpu --log-interval 1",
    )  # fmt: skip
    stdout = run_script([BASH, REPO_ROOT / "recipes" / "table2_glue.sh"], env).stdout
    assert re.search(r"^\| SameDoc \| accuracy \| [\d.]+ \| 1e-3 \| [\d.]+ \|$", stdout, re.M), stdout
    log = (tmp_path / "table2" / "runs" / "SameDoc" / "lr1e-3" / "train.log").read_text()
    assert "Loaded checkpoint" in log and "initialised from the pre-trained pooler" in log
    assert 0 <= float(valid_stats(log)["accuracy"]) <= 100


def test_fairseq_masked_lm_task_trains_normformer_roberta(tiny_bert_corpus, tmp_path):
    stdout = run_cli(["fairseq-train", tiny_bert_corpus.data_bin, "--user-dir", USER_DIR, "--task", "masked_lm",
                      "--criterion", "masked_lm", "--arch", "normformer_roberta_base", *TINY,
                      "--tokens-per-sample", "64", *TRAIN, "--max-update", "3", "--save-dir", tmp_path,
                      "--no-save"]).stdout  # fmt: skip
    stats = valid_stats(stdout)
    assert float(stats["ppl"]) > 1 and "NormFormerRobertaModel" in stdout


def test_export_hf_writes_a_directory_transformers_loads(swap_run, tmp_path):
    checkpoint, out = swap_run[0], tmp_path / "hf"
    export_hf.main([str(checkpoint), str(out)])
    hf = transformers.BertForPreTraining.from_pretrained(out).eval()
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model, d = models[0].eval(), task.source_dictionary
    assert (out / "vocab.txt").read_text().splitlines() == d.symbols

    tokens = torch.tensor([[d.bos(), 10, 11, 12, d.eos(), 13, 14, d.eos()]])
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1]])
    ours, extra = model(tokens)
    theirs = hf(input_ids=tokens, token_type_ids=types)
    torch.testing.assert_close(ours, theirs.prediction_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(extra["nsp_logits"], theirs.seq_relationship_logits, atol=1e-4, rtol=0)

    before = sorted(p.name for p in out.iterdir())  # an existing export is never overwritten
    with pytest.raises(SystemExit, match="exists and is not empty"):
        export_hf.main([str(checkpoint), str(out)])
    assert sorted(p.name for p in out.iterdir()) == before


def test_export_hf_native_names_what_transformers_cannot_represent(tiny_recipe, tmp_path):
    work, _ = tiny_recipe
    with pytest.raises(SystemExit, match="--scale-attn, --scale-fc, --scale-heads.*--encoder-normalize-before"):
        export_hf.main([str(work / "normformer_bert_base" / "checkpoint_last.pt"), str(tmp_path / "hf"), "--native"])
    assert not (tmp_path / "hf").exists()


@torch.no_grad()
def test_export_hf_fill_mask_pipeline_reads_the_models_predictions(tiny_recipe, tiny_bert_corpus, tmp_path):
    """The NormFormer BERT through normformer-export-hf --spm-model and transformers' fill-mask pipeline: its
    candidates are the top logits at <mask>, each sequence SentencePiece's decode of the pieces with the
    candidate in place, each token_str the candidate's piece with "▁" read as a space."""
    work, _ = tiny_recipe
    checkpoint, out = work / "normformer_bert_base" / "checkpoint_last.pt", tmp_path / "hf"
    export_hf.main([str(checkpoint), str(out), "--spm-model", str(tiny_bert_corpus.spm_model)])
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    model, d = models[0].eval(), task.source_dictionary
    sp = spm.SentencePieceProcessor(model_file=str(tiny_bert_corpus.spm_model))
    fill_mask = transformers.pipeline("fill-mask", model=str(out), trust_remote_code=True)
    for text in ["Return the <mask> of items in the list.", "If the path is <mask>, raise an error."]:
        ids = fill_mask.tokenizer(text, return_tensors="pt")["input_ids"]  # <s> ... <mask> ... </s>
        at = ids[0].tolist().index(d.index("<mask>"))
        scores, candidates = model(ids)[0][0, at].softmax(-1).topk(5)
        results = fill_mask(text, top_k=5)
        assert [r["token"] for r in results] == candidates.tolist()
        assert [r["score"] for r in results] == pytest.approx(scores.tolist(), abs=1e-5)
        for result in results:
            filled = ids[0].clone()
            filled[at] = result["token"]
            assert result["sequence"] == sp.decode([d[i] for i in filled[1:-1]])
            assert result["token_str"] == d[result["token"]].replace("▁", " ")
