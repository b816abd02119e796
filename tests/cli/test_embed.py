"""normformer-embed (fairseq_normformer/cli/embed.py): contextual vectors of a masked LM and a causal LM
equal the states of a forward pass we make ourselves; words pool their SentencePiece pieces."""
import functools

import numpy as np
import pytest
import sentencepiece as spm
import torch
from fairseq import checkpoint_utils

from fairseq_normformer.cli import embed

from ..conftest import USER_DIR, run_cli

TRAIN = ["--batch-size", "8", "--optimizer", "adam", "--lr", "1e-3", "--max-update", "1", "--num-workers", "0",
         "--cpu", "--seed", "1", "--no-epoch-checkpoints", "--disable-validation", "--log-format", "simple"]  # fmt: skip
BERT = ["--task", "mlm_nsp", "--criterion", "mlm_nsp", "--arch", "preln_bert_base", "--encoder-layers", "4",
        "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--tokens-per-sample", "64"]  # fmt: skip
LM = ["--task", "language_modeling", "--arch", "normformer_lm", "--decoder-layers", "2", "--decoder-embed-dim", "16",
      "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2", "--tokens-per-sample", "64",
      "--scale-attn", "--scale-fc", "--scale-heads"]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoints(tiny_bert_corpus, tmp_path_factory):
    """{"bert": 4-layer Pre-LN BERT, "lm": 2-layer NormFormer LM}, one update each on the tiny corpus."""
    found = {}
    for name, flags in (("bert", BERT), ("lm", LM)):
        save_dir = tmp_path_factory.mktemp(name)
        run_cli(["fairseq-train", tiny_bert_corpus.data_bin, "--user-dir", USER_DIR, *flags, *TRAIN, "--save-dir", save_dir])
        found[name] = save_dir / "checkpoint_last.pt"
    return found


@pytest.fixture(scope="module")
def lines(tiny_bert_corpus):
    """Real sentences of the validation text (and an empty line, which gives no rows)."""
    text = [l for l in (tiny_bert_corpus.raw_dir / "valid.txt").read_text().splitlines() if 3 < len(l.split()) < 12]
    return text[:3] + [""] + text[3:5]


@functools.lru_cache(maxsize=None)
def load_model(checkpoint):
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    return models[0].eval(), task.source_dictionary


def reference_states(checkpoint, spm_model, line, causal):
    """States 0..L of our own forward pass: fairseq's inner states, the output features last."""
    model, d = load_model(checkpoint)
    ids = [d.index(p) for p in spm.SentencePieceProcessor(model_file=str(spm_model)).encode(line, out_type=str)]
    tokens = torch.tensor([[d.eos()] + ids] if causal else [[d.bos()] + ids + [d.eos()]])
    with torch.no_grad():
        if causal:
            x, extra = model.decoder(tokens, features_only=True)
        else:
            x, extra = model.encoder.extract_features(tokens, return_all_hiddens=True)
    states = [s.transpose(0, 1)[0] for s in extra["inner_states"][:-1]] + [x[0]]
    return [s[1 : 1 + len(ids)].numpy() for s in states]


def read_rows(path):
    return [r.split("\t") for r in path.read_text(encoding="utf-8").splitlines()[1:]]


@pytest.mark.parametrize("name,layer", [("bert", 0), ("bert", 2), ("lm", 1), ("lm", -1)])
@pytest.mark.slow
def test_vectors_equal_a_direct_forward_and_words_pool_their_pieces(checkpoints, tiny_bert_corpus, lines, tmp_path,
                                                                     name, layer):  # fmt: skip
    text = tmp_path / "in.txt"
    text.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    embed.main([str(checkpoints[name]), str(text), str(out), "--spm-model", str(tiny_bert_corpus.spm_model),
                "--layer", str(layer), "--pool", "mean"])  # fmt: skip
    tokens, words = np.load(out / "tokens.npy"), np.load(out / "words.npy")
    token_rows, word_rows = read_rows(out / "tokens.tsv"), read_rows(out / "words.tsv")
    assert len(tokens) == len(token_rows) and len(words) == len(word_rows)
    for number, line in enumerate(lines, start=1):
        rows = [i for i, r in enumerate(token_rows) if int(r[0]) == number]
        if not line:
            assert not rows
            continue
        expected = reference_states(checkpoints[name], tiny_bert_corpus.spm_model, line, causal=name == "lm")[layer]
        np.testing.assert_allclose(tokens[rows], expected, atol=1e-5, rtol=0)
        line_words = [i for i, r in enumerate(word_rows) if int(r[0]) == number]
        assert [word_rows[i][2] for i in line_words] == line.split()  # "▁" word starts = whitespace words
        for i in line_words:
            pieces = [rows[j] for j, t in enumerate(rows) if token_rows[t][2] == word_rows[i][1]]
            np.testing.assert_allclose(words[i], tokens[pieces].mean(0), atol=1e-6)


@pytest.mark.parametrize("last_four", ["sum", "concat"])
def test_last_four_layers_sum_or_concatenate(checkpoints, tiny_bert_corpus, lines, tmp_path, last_four):
    text = tmp_path / "in.txt"
    text.write_text(lines[0] + "\n")
    embed.main([str(checkpoints["bert"]), str(text), str(tmp_path / "out"), "--spm-model",
                str(tiny_bert_corpus.spm_model), "--last-four", last_four])  # fmt: skip
    tokens, words = np.load(tmp_path / "out" / "tokens.npy"), np.load(tmp_path / "out" / "words.npy")
    states = reference_states(checkpoints["bert"], tiny_bert_corpus.spm_model, lines[0], causal=False)[1:]
    expected = sum(states) if last_four == "sum" else np.concatenate(states, axis=1)
    assert tokens.shape == (len(expected), 16 if last_four == "sum" else 64)
    np.testing.assert_allclose(tokens, expected, atol=1e-5, rtol=0)
    first_pieces = [int(r[1]) for r in read_rows(tmp_path / "out" / "tokens.tsv")]
    starts = [t for t, r in zip(first_pieces, read_rows(tmp_path / "out" / "tokens.tsv")) if r[3].startswith("▁")]
    np.testing.assert_array_equal(words, tokens[starts])  # --pool first (the default)


def test_bad_input_names_the_problem_and_writes_nothing(checkpoints, tiny_bert_corpus, lines, tmp_path):
    text, out = tmp_path / "in.txt", tmp_path / "out"
    text.write_text(lines[0] + "\n")
    spm_model = str(tiny_bert_corpus.spm_model)
    with pytest.raises(SystemExit, match=r"--layer 5 is out of range: this model has layers 0 \(embeddings\) to 2"):
        embed.main([str(checkpoints["lm"]), str(text), str(out), "--spm-model", spm_model, "--layer", "5"])
    with pytest.raises(SystemExit, match="--last-four needs at least 4 layers; this model has 2"):
        embed.main([str(checkpoints["lm"]), str(text), str(out), "--spm-model", spm_model, "--last-four", "sum"])
    with pytest.raises(SystemExit, match="SentencePiece model .*missing.model not found"):
        embed.main([str(checkpoints["lm"]), str(text), str(out), "--spm-model", str(tmp_path / "missing.model")])
    assert not out.exists()


def test_the_command_line_prints_what_it_wrote(checkpoints, tiny_bert_corpus, lines, tmp_path):
    out = tmp_path / "out"
    result = run_cli(["normformer-embed", checkpoints["bert"], "-", out, "--spm-model", tiny_bert_corpus.spm_model],
                     input=lines[0] + "\n")  # fmt: skip
    n_words = len(lines[0].split())
    assert f"word vectors of dimension 16 -> {out}" in result.stdout and f" and {n_words} word" in result.stdout
    assert np.load(out / "words.npy").shape == (n_words, 16)
