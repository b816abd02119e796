"""Fine-tuning beyond GLUE through the real CLIs: the session's tiny MLM+NSP checkpoint fine-tuned
with fairseq-train (--restore-file and the --reset-* flags) on SQuAD v2.0, CoNLL (tags and spans) and
SWAG data built from the standard library, then normformer-predict; its printed EM/F1 and entity F1
are recomputed here from the written predictions (official-logic EM/F1 in tests/metrics, seqeval for
the entities)."""
import json
import re

import pytest
import sentencepiece as spm
from fairseq.data import Dictionary, data_utils

from fairseq_normformer.cli import swag_data
from fairseq_normformer.corpus.finetune_tasks import build_finetune_data
from fairseq_normformer.data.conll import read_conll
from fairseq_normformer.data.swag import read_swag
from fairseq_normformer.metrics import conll, squad

from ..conftest import TINY, TRAIN, USER_DIR, run_cli, valid_stats

MAX_CHARS = 8_000  # of docstrings per task: ~400 characters of validation data
# fairseq's default: its batch_by_size would drop a last validation batch of size % 8 (fixes/batches.py)
FAIRSEQ_MULTIPLE = ["--required-batch-size-multiple", "8"]


@pytest.fixture
def checkpoint(swap_run):
    """The session's pre-trained Post-LN BERT (64 positions)."""
    return swap_run[0]


def finetune(corpus, checkpoint, data, save_dir, task, flags=()):
    return run_cli(["fairseq-train", data, "--user-dir", USER_DIR, "--task", task, "--criterion", task,
                    "--arch", "postln_bert_base", *TINY, "--max-positions", "64", "--max-seq-length", "64",
                    "--spm-model", corpus.spm_model, "--dict", corpus.data_bin / "dict.txt",
                    "--restore-file", checkpoint, "--reset-optimizer", "--reset-dataloader", "--reset-meters",
                    *TRAIN, "--max-update", "1", "--required-batch-size-multiple", "1", "--save-dir", save_dir,
                    "--no-epoch-checkpoints", *flags]).stdout  # fmt: skip


def predict(*args):
    return run_cli(["normformer-predict", *args]).stdout


def test_squad_v2_fine_tunes_from_a_pretrained_checkpoint_and_predicts(tiny_bert_corpus, checkpoint, tmp_path):
    data = tmp_path / "squad2"
    build_finetune_data(data, "squad2", max_chars=MAX_CHARS)
    stdout = finetune(tiny_bert_corpus, checkpoint, data, tmp_path / "qa", "extractive_qa",
                      ["--version-2-with-negative", "--doc-stride", "16", *FAIRSEQ_MULTIPLE])  # fmt: skip
    assert "Loaded checkpoint" in stdout and "token_heads.extractive_qa.out_proj.weight: new" in stdout
    gold = {qa["id"]: [a["text"] for a in qa["answers"]]
            for article in json.loads((data / "valid.json").read_text())["data"]
            for p in article["paragraphs"] for qa in p["qas"]}  # fmt: skip
    stats = valid_stats(stdout)
    assert 0 <= float(stats["em"]) <= float(stats["f1"]) <= 100
    assert len(gold) % 8 and int(stats["questions"]) == len(gold)  # EM and F1 over every question

    out = tmp_path / "predictions.json"
    printed = predict("qa", tmp_path / "qa" / "checkpoint_last.pt", data / "valid.json", "--out", out, "--tune-threshold")
    predictions = json.loads(out.read_text())
    assert predictions.keys() == gold.keys()
    result = squad.evaluate(gold, predictions)
    assert f"exact {result['exact']:.2f} | f1 {result['f1']:.2f} | total {len(gold)}" in printed
    assert re.search(r"no-answer threshold chosen on .*valid.json: -?[\d.]+ \(F1 [\d.]+\)", printed)


@pytest.mark.slow
def test_conll_fine_tunes_and_writes_conll_predictions(tiny_bert_corpus, checkpoint, tmp_path):
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    data = tmp_path / "conll"
    build_finetune_data(data, "conll", max_chars=MAX_CHARS)
    stdout = finetune(tiny_bert_corpus, checkpoint, data, tmp_path / "ner", "token_classification", FAIRSEQ_MULTIPLE)
    stats = valid_stats(stdout)
    assert {"accuracy", "precision", "recall", "f1"} <= stats.keys()
    sentences = read_conll(data / "valid.conll")
    entities = sum(len(seqeval_metrics.sequence_labeling.get_entities(s.tags)) for s in sentences)
    assert len(sentences) % 8 and int(stats["chunks_gold"]) == entities  # entity F1 over every sentence

    out = tmp_path / "predictions.conll"
    printed = predict("tags", tmp_path / "ner" / "checkpoint_last.pt", data / "valid.conll", "--out", out)
    sentences = [block.splitlines() for block in out.read_text().strip().split("\n\n")]
    gold = [[line.split()[1] for line in s] for s in sentences]
    predicted = [[line.split()[2] for line in s] for s in sentences]
    assert gold == [s.tags for s in read_conll(data / "valid.conll")]
    f1 = 100 * seqeval_metrics.f1_score(gold, predicted)
    assert f"f1 {f1:.2f}" in printed and f"f1 {conll.evaluate(gold, predicted)['f1']:.2f}" in printed


@pytest.mark.slow
def test_span_classification_fine_tunes_and_reports_entity_f1(tiny_bert_corpus, checkpoint, tmp_path):
    data = tmp_path / "conll"
    build_finetune_data(data, "conll", max_chars=MAX_CHARS)
    stdout = finetune(tiny_bert_corpus, checkpoint, data, tmp_path / "spans", "token_classification",
                      ["--span-classification", "--max-span-length", "4", "--span-decoding", "all"])  # fmt: skip
    assert "token_heads.span_classification.start_ffn.0.weight: new" in stdout
    stats = valid_stats(stdout)
    assert 0 <= float(stats["precision"]) <= 100 and 0 <= float(stats["f1"]) <= 100 and "accuracy" in stats


@pytest.mark.slow
def test_swag_fine_tunes_through_sentence_ranking(tiny_bert_corpus, checkpoint, tmp_path):
    build_finetune_data(tmp_path / "swag", "swag", max_chars=40_000)
    data = tmp_path / "ranking"
    swag_data.main([str(tmp_path / "swag"), "--spm-model", str(tiny_bert_corpus.spm_model),
                    "--dict", str(tiny_bert_corpus.data_bin / "dict.txt"), "--out", str(data)])  # fmt: skip
    # input2 of the first valid example: the second choice, sent2 then ending1, in the corpus's pieces
    first = read_swag(tmp_path / "swag" / "val.csv")[0]
    d = Dictionary.load(str(data / "input2" / "dict.txt"))
    pieces = spm.SentencePieceProcessor(model_file=str(tiny_bert_corpus.spm_model)).encode(
        f"{first.start} {first.endings[1]}", out_type=str)  # fmt: skip
    assert d.string(data_utils.load_indexed_dataset(str(data / "input2" / "valid"), d)[0]) == " ".join(pieces)

    stdout = run_cli(["fairseq-train", data, "--user-dir", USER_DIR, "--task", "sentence_ranking",
                      "--criterion", "sentence_ranking", "--num-classes", "4", "--init-token", "0",
                      "--max-positions", "64", "--shorten-method", "truncate", "--arch", "postln_bert_base", *TINY,
                      "--restore-file", checkpoint, "--reset-optimizer", "--reset-dataloader", "--reset-meters",
                      *TRAIN, "--max-update", "1", "--required-batch-size-multiple", "1",
                      "--save-dir", tmp_path / "swag_run", "--no-save"]).stdout  # fmt: skip
    assert "Loaded checkpoint" in stdout and "initialised from the pre-trained pooler" in stdout
    assert 0 <= float(valid_stats(stdout)["accuracy"]) <= 100
