"""The masked-LM study's measurements (recipes/mlm_small.sh): the unigram baseline against counts of the raw
text encoded independently, and normformer-analyze mlm-curves / time-to-target --metric mlm_ppl on a real
mlm_nsp run, and the
recipe's commands."""
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
import sentencepiece as spm
from fairseq import options
from fairseq.data import Dictionary

from fairseq_normformer.analysis.training_log import read_training_log
from fairseq_normformer.analysis.unigram import unigram_baseline
from fairseq_normformer.cli.analyze import build_parser
from fairseq_normformer.cli.analyze import main as analyze
from tests.conftest import REPO_ROOT, pretrain, recorded_commands

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)


def raw_counts(corpus, split: str, dictionary: Dictionary) -> Counter:
    """Piece ids of a split's raw text: SentencePiece, then the fairseq dictionary (no binarized data)."""
    sp = spm.SentencePieceProcessor(model_file=str(corpus.spm_model))
    counts = Counter()
    for line in (corpus.raw_dir / f"{split}.txt").read_text().splitlines():
        if line.strip():
            counts.update(dictionary.index(piece) for piece in sp.encode(line, out_type=str))
    return Counter({i: c for i, c in counts.items() if i >= dictionary.nspecial})  # [MASK] never hides <unk>


def test_unigram_baseline_from_raw_text(tiny_bert_corpus):
    dictionary = Dictionary.load(str(tiny_bert_corpus.data_bin / "dict.txt"))
    train, valid = (raw_counts(tiny_bert_corpus, split, dictionary) for split in ("train", "valid"))
    top = train.most_common(1)[0][0]
    n, total, vocab = sum(valid.values()), sum(train.values()), len(dictionary) - dictionary.nspecial
    ppl = math.exp(-sum(c * math.log((train[p] + 1) / (total + vocab)) for p, c in valid.items()) / n)
    result = unigram_baseline(tiny_bert_corpus.data_bin)
    assert result["piece"] == dictionary[top] and result["tokens"] == n
    assert result["accuracy"] == pytest.approx(100.0 * valid[top] / n)
    assert result["perplexity"] == pytest.approx(ppl)


@pytest.fixture(scope="module")
def mlm_log(tiny_bert_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("mlm_study")
    stdout = pretrain(tiny_bert_corpus.data_bin, out, "normformer_bert_base", ["--validate-interval-updates", "2"], updates=4)
    (out / "train.log").write_text(stdout)
    return out / "train.log"


def test_mlm_curves_and_time_to_target_on_mlm_ppl(mlm_log, tiny_bert_corpus, tmp_path):
    final = read_training_log(mlm_log).final_valid()
    analyze(["mlm-curves", f"--run=NormFormer={mlm_log}", "--data", str(tiny_bert_corpus.data_bin), "--out-dir", str(tmp_path)])
    unigram = unigram_baseline(tiny_bert_corpus.data_bin)
    lines = (tmp_path / "mlm_curves.md").read_text().splitlines()
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}
    assert float(rows["NormFormer"][3]) == pytest.approx(final["mlm_accuracy"], abs=1e-3)
    assert float(rows["NormFormer"][4]) == pytest.approx(final["mlm_accuracy"] / unigram["accuracy"], rel=1e-3)
    assert float(rows["unigram baseline"][3]) == pytest.approx(unigram["accuracy"], rel=1e-3)
    assert (tmp_path / "mlm_curves.png").read_bytes()[:4] == b"\x89PNG"

    analyze(["time-to-target", "--baseline", str(mlm_log), "--candidate", str(mlm_log), "--metric", "mlm_ppl",
             "--out-dir", str(tmp_path / "ttt")])  # fmt: skip
    (seed,) = json.loads((tmp_path / "ttt" / "fig2_time_to_target.json").read_text())["seeds"]
    assert seed["target_ppl"] == final["mlm_ppl"] and seed["hit_ppl"] <= final["mlm_ppl"]
    with pytest.raises(SystemExit, match=re.escape("has no 'ppl' (it has: ")):
        analyze(["time-to-target", "--baseline", str(mlm_log), "--candidate", str(mlm_log), "--out-dir", str(tmp_path)])


def test_recipe_sweeps_both_models_then_trains_each_at_its_lr_with_seeds(tmp_path):
    """recipes/mlm_small.sh, DRY_RUN=1: the sweep (seed 1) and each model's seeds share everything but the arch,
    the LR and the seed; the tables read the runs it trains; PRECISION=bf16 adds --bf16 and nothing else."""
    env = {**os.environ, "DRY_RUN": "1", "SEEDS": "2", "LRS": "1e-3 2e-3", "BASE_LR": "1e-3", "NF_LR": "2e-3",
           "PY": sys.executable}  # fmt: skip
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        subprocess.run(["bash", REPO_ROOT / "recipes" / "mlm_small.sh", "small", out], env={**env, "PRECISION": precision},
                       check=True, capture_output=True)  # fmt: skip
        argvs = recorded_commands(out / "commands.sh")
        trains = [options.parse_args_and_arch(options.get_training_parser(), a[1:]) for a in argvs if a[0].endswith("fairseq-train")]
        runs = [(a.arch, a.lr[0], a.seed, a.save_dir.removeprefix(str(out) + "/")) for a in trains]
        assert runs == [("preln_bert_base", 1e-3, 1, "preln-lr1e-3/checkpoints"), ("preln_bert_base", 2e-3, 1, "preln-lr2e-3/checkpoints"),
                        ("normformer_bert_base", 1e-3, 1, "normformer-lr1e-3/checkpoints"),
                        ("normformer_bert_base", 2e-3, 1, "normformer-lr2e-3/checkpoints"),
                        ("preln_bert_base", 1e-3, 2, "preln-lr1e-3/seed2/checkpoints"),
                        ("normformer_bert_base", 2e-3, 2, "normformer-lr2e-3/seed2/checkpoints")]  # fmt: skip
        shared = {(a.task, a.criterion, a.encoder_layers, a.encoder_embed_dim, a.batch_size, a.tokens_per_sample, a.bf16)
                  for a in trains}  # fmt: skip
        assert shared == {("mlm_nsp", "mlm_nsp", 4, 256, 32, 128, precision == "bf16")}
        analyses = [a for a in argvs if a[0].endswith("normformer-analyze")]
        assert [a[1] for a in analyses] == ["metric-table", "metric-table", "mlm-curves", "time-to-target"]
        ttt = build_parser().parse_args(analyses[-1][1:])
        assert ttt.metric == "mlm_ppl" and [p.removeprefix(str(out) + "/") for p in ttt.candidate] == [
            "normformer-lr2e-3/train.log", "normformer-lr2e-3/seed2/train.log"]  # fmt: skip


def test_recipe_adds_the_norm_bench_schemes_each_pre_ln_plus_its_switch(tmp_path):
    """MODELS adds sandwich, QK-norm and RMSNorm: Pre-LN's arch and its switch, the sweep then seeds at the sweep's
    best (DRY_RUN=1: the grid's middle), each one's time to Pre-LN's perplexity; an unknown model is refused."""
    env = {**os.environ, "DRY_RUN": "1", "SEEDS": "2", "LRS": "1e-3 2e-3", "BASE_LR": "1e-3", "PY": sys.executable,
           "MODELS": "preln sandwich qknorm rmsnorm"}  # fmt: skip
    subprocess.run(["bash", REPO_ROOT / "recipes" / "mlm_small.sh", "small", tmp_path], env=env, check=True,
                   capture_output=True)  # fmt: skip
    argvs = recorded_commands(tmp_path / "commands.sh")
    trains = [options.parse_args_and_arch(options.get_training_parser(), a[1:]) for a in argvs if a[0].endswith("fairseq-train")]
    switches = {(a.save_dir.removeprefix(str(tmp_path) + "/"), a.arch, getattr(a, "sandwich_norm", False),
                 getattr(a, "qk_norm", False), getattr(a, "norm_type", "layernorm")) for a in trains}  # fmt: skip
    expected = set()
    for name, flags in (("preln", (False, False, "layernorm")), ("sandwich", (True, False, "layernorm")),
                        ("qknorm", (False, True, "layernorm")), ("rmsnorm", (False, False, "rmsnorm"))):
        runs = ["lr1e-3", "lr2e-3", "lr1e-3/seed2" if name == "preln" else "lr2e-3/seed2"]
        expected |= {(f"{name}-{run}/checkpoints", "preln_bert_base", *flags) for run in runs}
    assert switches == expected
    ttt = [build_parser().parse_args(a[1:]) for a in argvs if a[0].endswith("normformer-analyze") and a[1] == "time-to-target"]
    assert [t.out_dir.removeprefix(str(tmp_path) + "/") for t in ttt] == [
        "time_to_target-sandwich", "time_to_target-qknorm", "time_to_target-rmsnorm"]  # fmt: skip
    refused = subprocess.run(["bash", REPO_ROOT / "recipes" / "mlm_small.sh", "small", tmp_path / "x"],
                             env={**env, "MODELS": "preln dyt"}, capture_output=True, text=True)  # fmt: skip
    assert refused.returncode == 2 and "--schemes: unknown scheme 'dyt' (known: " in refused.stderr
