"""``normformer-build-corpus --text``: your own plain text, split by whole documents (blank-line separated,
every 20th to test and the one before to valid), gives data that fairseq-train trains on."""
import inspect
import json
import textwrap

import pytest

from fairseq_normformer.cli import build_corpus as build_corpus_cli
from fairseq_normformer.corpus.stdlib import format_lines
from fairseq_normformer.corpus.text import file_documents, split_text

from ..conftest import TRAIN, USER_DIR, run_cli, valid_stats

N_DOCUMENTS = 60


def first_paragraphs() -> list:
    """The docstrings (as one paragraph each) of this Python's ``str``, ``bytes`` and ``dict`` methods."""
    objects = [getattr(t, n) for t in (str, bytes, dict) for n in sorted(dir(t)) if not n.startswith("_")]
    paragraphs = [" ".join(inspect.getdoc(o).split()) for o in objects if inspect.getdoc(o)]
    return [p for p in paragraphs if len(p) > 20][:N_DOCUMENTS]


@pytest.fixture(scope="module")
def own_text(tmp_path_factory):
    """A plain-text file: hard-wrapped paragraphs, blank lines (some with spaces, some doubled) between them."""
    paragraphs = first_paragraphs()
    assert len(paragraphs) == N_DOCUMENTS
    separators = ["\n\n", "\n   \n", "\n\n\n"]
    text = "".join(textwrap.fill(p, width=50) + separators[i % 3] for i, p in enumerate(paragraphs))
    path = tmp_path_factory.mktemp("text") / "notes.txt"
    path.write_text(text, encoding="utf-8")
    return path, paragraphs


def lines_of(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_text_becomes_a_corpus_split_by_whole_documents_that_fairseq_trains_on(own_text, tmp_path, capsys):
    path, paragraphs = own_text
    build_corpus_cli.main(["--text", str(path), "--out", str(tmp_path / "corpus"), "--vocab-size", "300"])
    assert "fairseq-train" in capsys.readouterr().out
    raw = tmp_path / "corpus" / "raw"
    held_out = {"valid": paragraphs[18::20], "test": paragraphs[19::20]}  # documents 19, 39, 59 and 20, 40, 60
    assert lines_of(raw / "valid.txt") == held_out["valid"] and lines_of(raw / "test.txt") == held_out["test"]
    assert lines_of(raw / "train.txt") == [p for i, p in enumerate(paragraphs) if i % 20 < 18]
    stats = json.loads((tmp_path / "corpus" / "corpus.json").read_text())["stats"]
    assert stats["valid"]["files"] == 1 and stats["train"]["documents"] == N_DOCUMENTS - 6

    stdout = run_cli(["fairseq-train", tmp_path / "corpus" / "data-bin", "--user-dir", USER_DIR, "--task",
                      "language_modeling", "--tokens-per-sample", "32", "--arch", "normformer_lm",
                      "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
                      "--decoder-attention-heads", "4", *TRAIN, "--max-update", "3", "--no-save"]).stdout  # fmt: skip
    assert float(valid_stats(stdout)["ppl"]) > 1 and "num_updates 3" in stdout


def test_bert_format_is_a_sentence_a_line_and_a_blank_line_between_documents(own_text):
    path, paragraphs = own_text
    splits = split_text(file_documents(path, path.read_text(encoding="utf-8")), max_chars=None)
    lines = format_lines(splits["train"], "bert")  # the text build_corpus writes to raw/train.txt
    documents = [d.split("\n") for d in "\n".join(lines).split("\n\n")]
    assert [" ".join(sentences) for sentences in documents] == [p for i, p in enumerate(paragraphs) if i % 20 < 18]
    assert any(len(sentences) > 1 for sentences in documents)
    assert all(s[-1] in ".!?:)" for sentences in documents for s in sentences[:-1])


@pytest.mark.parametrize("args, message", [
    (["--text", "missing.txt"], "missing.txt: no such file"),
    (["--text", "few.txt"], "the text has 3 documents .* needs at least 20"),
    (["--text", "latin1.txt"], "latin1.txt is not UTF-8 text"),
    (["--text", "few.txt", "--format", "swag"], "--text and --text-dir build the lm and bert formats"),
    (["--text", "few.txt", "--python-docs"], "pass one of them"),
    (["--dedup"], "--dedup applies to your own text"),
])  # fmt: skip
def test_bad_text_is_named_and_nothing_is_written(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "few.txt").write_text("one\n\ntwo\n\nthree\n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(SystemExit, match=message):
        build_corpus_cli.main([*args, "--out", "out"])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_held_out_copies_of_train_documents_are_reported_and_dedup_removes_them(own_text, tmp_path, capsys):
    """Issue 53: on licence texts 41% of valid's documents were word-for-word copies of train's, unreported."""
    _, paragraphs = own_text
    documents = paragraphs[:40]
    documents[18], documents[38], documents[19] = documents[0], documents[1], documents[2]  # valid, valid, test
    path = tmp_path / "copies.txt"
    path.write_text("".join(d + "\n\n" for d in documents), encoding="utf-8")
    build_corpus_cli.main(["--text", str(path), "--out", str(tmp_path / "kept"), "--vocab-size", "300"])
    out = capsys.readouterr().out
    valid, test = len(documents[0]) + len(documents[1]), len(documents[2]) + len(documents[39])
    assert f"valid documents also in train (exact copies): 2 of 2, {valid:,} of {valid:,} characters (100.0%)" in out
    assert (f"test documents also in train (exact copies): 1 of 2, {len(documents[2]):,} of {test:,} characters "
            f"({len(documents[2]) / test:.1%}); --dedup removes them") in out  # fmt: skip

    build_corpus_cli.main(["--text", str(path), "--out", str(tmp_path / "dedup"), "--vocab-size", "300", "--dedup"])
    out = capsys.readouterr().out
    removed = len(documents[0]) + len(documents[1]) + len(documents[2])
    assert f"--dedup left out 3 exact copies of earlier documents ({removed:,} characters)" in out
    assert "valid documents also in train (exact copies): 0 of 1," in out  # 37 documents: the 19th is valid
    assert "test documents also in train (exact copies): 0 of 1," in out
    raw = tmp_path / "dedup" / "raw"
    lines = [lines_of(raw / f"{split}.txt") for split in ("train", "valid", "test")]
    assert sorted(sum(lines, [])) == sorted(set(documents)) and len(set(documents)) == 37
