"""End to end through the real console scripts: fairseq-train, fairseq-eval-lm, fairseq-interactive,
fairseq-generate and fairseq-hydra-train with ``--user-dir`` pointing at this package."""
import json
import logging
import math
import re
import shutil
import subprocess
import sys

import pytest
import sentencepiece as spm
import torch
from fairseq.data import Dictionary, data_utils
from fairseq.hub_utils import GeneratorHubInterface

from fairseq_normformer.models import NormFormerLanguageModel

from tests.cli.lm_params import expected_params
from tests.conftest import REPO_ROOT, USER_DIR, python_warnings, run_cli

L, D, F, H = 2, 32, 64, 4  # the tiny models' layers, model dim, FFN dim, heads
NORMFORMER_FLAGS = ["--scale-attn", "--scale-fc", "--scale-heads"]


def logged_params(output: str) -> int:
    return int(re.search(r"num\. shared model params: ([\d,]+)", output).group(1).replace(",", ""))


def json_records(output: str, tag: str) -> list:
    """fairseq's --log-format json records of one kind ('train_inner', 'valid', ...)."""
    marker = re.compile(rf"(?:\| {tag} \| |\[{tag}\]\[INFO\] - )(\{{.*\}})")
    return [json.loads(m.group(1)) for m in marker.finditer(output)]


def vocab_size(corpus) -> int:
    return len(Dictionary.load(str(corpus.data_bin / "dict.txt")))


def split_tokens(corpus, split: str) -> int:
    """Tokens of a binarized split, read by fairseq's own loader."""
    dataset = data_utils.load_indexed_dataset(str(corpus.data_bin / split), None)  # alive while its sizes are read
    return int(dataset.sizes.sum())


def train_args(data_bin, save_dir, *flags, user_dir=USER_DIR):
    return [
        "fairseq-train", data_bin, "--user-dir", user_dir, "--task", "language_modeling",
        "--tokens-per-sample", "64", "--arch", "normformer_lm", "--decoder-layers", L,
        "--decoder-embed-dim", D, "--decoder-ffn-embed-dim", F, "--decoder-attention-heads", H,
        "--dropout", "0.0", "--optimizer", "adam", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "5", "--batch-size", "8", "--max-update", "40", "--seed", "1", "--num-workers", "0",
        "--required-batch-size-multiple", "1",  # else fairseq drops a last batch of < 8 (fairseq issue #5036)
        "--log-format", "json", "--log-interval", "5", "--no-epoch-checkpoints", "--save-dir", save_dir, *flags,
    ]  # fmt: skip


def cli(args, **kwargs):
    """run_cli in a real process (these tests are about the console scripts: their warnings, logging and start-up),
    with one torch thread: tiny models gain nothing from more, and two runs can share two cores."""
    return run_cli(args, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, process=True, **kwargs)


@pytest.fixture(scope="module")
def trained(tiny_lm_corpus, tmp_path_factory):
    """{'preln'|'normformer': (fairseq-train stdout, save dir)} after 40 updates on the tiny corpus, each run trained
    when a test first asks for it (make test-fast trains NormFormer only: the Pre-LN tests are slow)."""
    root = tmp_path_factory.mktemp("train")

    class Runs(dict):
        def __missing__(self, name):
            flags = {"preln": [], "normformer": NORMFORMER_FLAGS}[name]
            out = cli(train_args(tiny_lm_corpus.data_bin, root / name, *flags))
            assert python_warnings(out.stdout, out.stderr) == []
            self[name] = (out.stdout, root / name)
            return self[name]

    return Runs()


@pytest.mark.parametrize("name", [pytest.param("preln", marks=pytest.mark.slow), "normformer"])
def test_train_counts_parameters_and_lowers_the_loss(trained, tiny_lm_corpus, name):
    stdout, save_dir = trained[name]
    normformer = name == "normformer"
    expected = expected_params(vocab_size(tiny_lm_corpus), L, D, F, H, tied=False, normformer=normformer)
    assert logged_params(stdout) == expected
    losses = [float(r["loss"]) for r in json_records(stdout, "train_inner")]
    assert len(losses) == 8 and losses[-1] < losses[0] - 1.0, losses
    assert (save_dir / "checkpoint_last.pt").exists()


def test_eval_lm_agrees_with_training_validation(trained, tiny_lm_corpus):
    stdout, save_dir = trained["normformer"]
    out = cli(["fairseq-eval-lm", tiny_lm_corpus.data_bin, "--user-dir", USER_DIR, "--path",
                   save_dir / "checkpoint_last.pt", "--gen-subset", "valid", "--tokens-per-sample", "64",
                   "--batch-size", "8", "--num-workers", "0"])  # fmt: skip
    text = out.stdout + out.stderr
    assert python_warnings(text) == [] and "DEBUG" not in text  # fixes/startup.py: fairseq's basicConfig(DEBUG)
    loss, ppl = map(float, re.search(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+)", text).groups())
    assert math.isfinite(ppl) and ppl < vocab_size(tiny_lm_corpus)  # better than a uniform guess
    evaluated = int(re.search(r"Evaluated ([\d,]+) tokens", text).group(1).replace(",", ""))
    assert evaluated == split_tokens(tiny_lm_corpus, "valid")  # every token of the split, </s> included
    # fairseq-train validated the same weights on the same blocks (all of them, see train_args) at the end
    final_valid = json_records(stdout, "valid")[-1]
    assert final_valid["valid_num_updates"] == "40"
    assert loss == pytest.approx(float(final_valid["valid_loss"]), abs=1e-3)


def sample_interactively(save_dir, corpus, seed: int, prompts: str, process=True) -> str:
    """What docs/model.md's sampling command prints of the ``prompts`` lines (S-, H-, D- and P- lines, not the
    time each prompt took); in a real process (its warnings checked), or in this one."""
    args = ["fairseq-interactive", corpus.data_bin, "--user-dir", USER_DIR, "--task", "language_modeling",
            "--path", save_dir / "checkpoint_last.pt", "--bpe", "sentencepiece", "--sentencepiece-model",
            corpus.spm_model, "--sampling", "--beam", "1", "--sampling-topk", "50", "--max-len-b", "12",
            "--seed", seed]  # fmt: skip
    out = cli(args, input=prompts) if process else run_cli(args, input=prompts)
    if process:
        assert python_warnings(out.stdout, out.stderr) == []
    return "".join(re.findall(r"^[SHDP]-.*\n", out.stdout, flags=re.M))


def test_interactive_samples_continuations_of_raw_text_reproducibly(trained, tiny_lm_corpus):
    _, save_dir = trained["normformer"]
    prompt = "Return the value of"
    out = sample_interactively(save_dir, tiny_lm_corpus, 7, f"{prompt}\n" * 2)
    again = sample_interactively(save_dir, tiny_lm_corpus, 7, f"{prompt}\n" * 2, process=False)
    assert out == again  # the same seed, the same samples (a second run: here in this process)
    sources = [s.split() for s in re.findall(r"^S-\d+\t(.*)$", out, re.M)]
    hypotheses = [h.split() for h in re.findall(r"^H-\d+\t\S+\t(.*)$", out, re.M)]
    detokenized = re.findall(r"^D-\d+\t\S+\t(.*)$", out, re.M)
    assert len(sources) == len(hypotheses) == len(detokenized) == 2
    for source, hypothesis, text in zip(sources, hypotheses, detokenized):
        assert hypothesis[: len(source)] == source and len(hypothesis) > len(source)
        assert text.startswith(prompt)
    assert detokenized[0] != detokenized[1]  # sampled, not searched: the same prompt twice, two continuations


@pytest.mark.parametrize("name, normalization", [
    pytest.param("preln", "Pre-LN, layernorm", marks=pytest.mark.slow),
    ("normformer", "Pre-LN, layernorm, --scale-heads --scale-attn --scale-fc")])  # fmt: skip
def test_from_pretrained_logs_one_line_naming_the_model(trained, tiny_lm_corpus, caplog, name, normalization):
    """Issue 53: fairseq's from_pretrained logged the whole config as one INFO line of several KB, with a
    decoder_normalize_before: False that a Pre-LN normformer_lm never reads."""
    _, save_dir = trained[name]
    with caplog.at_level(logging.INFO):
        lm = NormFormerLanguageModel.from_pretrained(save_dir, checkpoint_file="checkpoint_last.pt",
                                                     data_name_or_path=str(tiny_lm_corpus.data_bin))  # fmt: skip
    params = sum(p.numel() for p in lm.models[0].parameters())
    assert params == expected_params(vocab_size(tiny_lm_corpus), L, D, F, H, tied=False, normformer=name == "normformer")
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "decoder_normalize_before" in m]  # no config dump
    assert [m for m in messages if m.startswith("loaded ")] == [
        f"loaded normformer_lm from {save_dir / 'checkpoint_last.pt'}: {params:,} parameters, {normalization}"]


def test_hub_interface_scores_and_samples(trained, tiny_lm_corpus):
    _, save_dir = trained["normformer"]
    lm = NormFormerLanguageModel.from_pretrained(save_dir, checkpoint_file="checkpoint_last.pt",
                                                 data_name_or_path=str(tiny_lm_corpus.data_bin), bpe="sentencepiece",
                                                 sentencepiece_model=str(tiny_lm_corpus.spm_model)).eval()  # fmt: skip
    assert isinstance(lm, GeneratorHubInterface)
    text, d = "Return the value of the list.", Dictionary.load(str(tiny_lm_corpus.data_bin / "dict.txt"))
    pieces = spm.SentencePieceProcessor(model_file=str(tiny_lm_corpus.spm_model)).encode(text, out_type=str)
    ids = [d.index(p) for p in pieces]
    model = lm.models[0]
    with torch.no_grad():  # each piece's log-probability given </s> (the start) and the pieces before it
        log_probs = model.get_normalized_probs(model(torch.tensor([[d.eos()] + ids[:-1]])), log_probs=True)[0]
    scored = lm.score(text)
    assert scored["tokens"].tolist() == ids
    torch.testing.assert_close(scored["positional_scores"], log_probs[torch.arange(len(ids)), ids])

    samples = []
    for _ in range(2):
        torch.manual_seed(3)
        samples.append(lm.sample("Return the value of", sampling=True, sampling_topk=50, max_len_b=12))
    assert samples[0] == samples[1] and samples[0].startswith("Return the value of") and len(samples[0]) > 19


def test_generate_continues_valid_prefixes(trained, tiny_lm_corpus):
    _, save_dir = trained["normformer"]
    out = cli(["fairseq-generate", tiny_lm_corpus.data_bin, "--user-dir", USER_DIR, "--task",
                   "language_modeling", "--path", save_dir / "checkpoint_last.pt", "--gen-subset", "valid",
                   "--tokens-per-sample", "16", "--prefix-size", "4", "--beam", "1", "--min-len", "8",
                   "--max-len-b", "8", "--batch-size", "16", "--num-workers", "0", "--num-shards", "8",
                   "--shard-id", "0"])  # a 1/8 shard of the valid blocks  # fmt: skip
    out = out.stdout + out.stderr
    targets = {i: t.replace("<<unk>>", "<unk>") for i, t in re.findall(r"^T-(\d+)\t(.*)$", out, re.M)}
    hypotheses = {i: h.split() for i, h in re.findall(r"^H-(\d+)\t\S+\t(.*)$", out, re.M)}
    scores = {i: list(map(float, p.split())) for i, p in re.findall(r"^P-(\d+)\t(.*)$", out, re.M)}
    n = int(re.search(r"Translated ([\d,]+) sentences", out).group(1).replace(",", ""))
    assert n > 0 and len(hypotheses) == len(scores) == len(targets) == n
    for i, tokens in hypotheses.items():  # forced prefix: the reference's first tokens
        k = min(4, len(tokens))
        assert tokens[:k] == targets[i].split()[:k]
        assert len(scores[i]) == len(tokens) + 1 and all(map(math.isfinite, scores[i]))  # + </s>
    assert any(len(tokens) >= 8 for tokens in hypotheses.values())  # tokens generated after the prefix


def test_hydra_train_builds_the_normformer(tiny_lm_corpus, tmp_path):
    out = cli(["fairseq-hydra-train", "--config-dir", REPO_ROOT / "examples" / "hydra",
                   "--config-name", "normformer_lm_tiny", f"task.data={tiny_lm_corpus.data_bin}",
                   f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
                   "optimization.max_update=20", "lr_scheduler.total_num_update=20"],
                  cwd=tmp_path)  # fmt: skip
    text = out.stdout + out.stderr
    # examples/hydra/model/normformer_lm_tiny.yaml: 2 layers, d=64, FFN 256, 4 heads, tied embeddings
    preln = expected_params(vocab_size(tiny_lm_corpus), 2, 64, 256, 4, tied=True, normformer=False)
    assert logged_params(text) == preln + 2 * (2 * 64 + 2 * 256) + 2 * 4
    assert json_records(text, "train_inner")[-1]["num_updates"] == "20"
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


@pytest.mark.slow
def test_gpt3_small_normformer_preset_has_the_papers_parameters(tiny_lm_corpus, tmp_path):
    """The 125M NormFormer preset through fairseq-train (in this process): built, logged and stepped once (one update
    on 8 tokens); its count is the Pre-LN GPT-3 shape's plus the NormFormer parameters. (The Pre-LN preset's
    count, and the difference, are checked in-process: tests/models/test_normformer_lm.py.)"""
    out = run_cli(["fairseq-train", tiny_lm_corpus.data_bin, "--user-dir", USER_DIR, "--task", "language_modeling",
                   "--arch", "normformer_lm_gpt3_small", "--tokens-per-sample", "8", "--batch-size", "1",
                   "--max-update", "1", "--optimizer", "adam", "--lr", "1e-4", "--no-save", "--disable-validation",
                   "--num-workers", "0", "--save-dir", tmp_path])  # fmt: skip
    vocab = vocab_size(tiny_lm_corpus)
    assert logged_params(out.stdout) == expected_params(vocab, 12, 768, 3072, 12, tied=True, normformer=True)


@pytest.mark.slow
def test_user_dir_of_a_non_editable_install(tiny_lm_corpus, tmp_path):
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO_ROOT / "fairseq_normformer", src / "fairseq_normformer", ignore=ignore)
    shutil.copy(REPO_ROOT / "setup.py", src)
    site = tmp_path / "site"
    pip_install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(pip_install + ["--target", site, src], check=True, capture_output=True)
    printed = subprocess.run([site / "bin" / "normformer-user-dir"], env={"PYTHONPATH": str(site)}, cwd=tmp_path,
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert printed == str((site / "fairseq_normformer").resolve())
    # fairseq's --user-dir imports the package from that path (not from this checkout) and trains with it
    probe = ("import argparse, sys, fairseq.utils; "
             f"fairseq.utils.import_user_module(argparse.Namespace(user_dir={printed!r})); "
             "print(sys.modules['fairseq_normformer'].__file__)")  # fmt: skip
    imported = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert imported.stdout.strip().splitlines()[-1:] == [str(site / "fairseq_normformer" / "__init__.py")], imported
    args = train_args(tiny_lm_corpus.data_bin, tmp_path / "ckpt", "--max-update", "2", *NORMFORMER_FLAGS,
                      user_dir=printed)  # fmt: skip
    out = cli(args, cwd=tmp_path).stdout
    assert "scale_attn=True" in out and json_records(out, "train")[-1]["train_num_updates"] == "2"
