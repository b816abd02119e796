"""The gettext translation corpus, on this machine's real German catalogues: the .mo reader against
Python's gettext, cleanup, the split by catalogue, the joint vocabulary and fairseq's translation task."""
import gettext

import pytest
import sentencepiece as spm
from fairseq.data import Dictionary, data_utils

from fairseq_normformer.cli.build_corpus import main as build_corpus_main
from fairseq_normformer.corpus.gettext import (
    MAX_HELD_OUT_PAIRS,
    _write_text,
    assign_splits,
    build_translation_corpus,
    catalogues,
    is_text,
    message_pairs,
    read_mo,
    split_pairs,
)
from fairseq_normformer.corpus.pipeline import SPLITS, read_manifest
from tests.conftest import SYSTEM_LOCALE_DIR, TINY_CATALOGUES, link_catalogues


def lines_of(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_read_mo_agrees_with_python_gettext(tiny_locale_dir):
    for path in catalogues(tiny_locale_dir, "de"):
        with path.open("rb") as f:
            reference = gettext.GNUTranslations(f)._catalog
        entries = read_mo(path)
        assert entries, path
        for msgid, msgstr in entries:
            if "\x00" in msgid:  # plural: gettext keys (singular, form index)
                singular = msgid.split("\x00")[0]
                assert [reference[singular, i] for i in range(len(msgstr.split("\x00")))] == msgstr.split("\x00")
            else:
                assert reference[msgid] == msgstr


def test_message_pairs_context_plural_lines_and_cleanup():
    assert message_pairs("menu\x04Open", "Öffnen") == [("Open", "Öffnen")]
    assert message_pairs("%d file\x00%d files", "%d Datei\x00%d Dateien") == [("%d file", "%d Datei"),
                                                                             ("%d files", "%d Dateien")]  # fmt: skip
    assert message_pairs("Usage:\n  -q  quiet\n", "Aufruf:\n  -q  still\n") == [("Usage:", "Aufruf:"),
                                                                              ("-q quiet", "-q still")]  # fmt: skip
    assert message_pairs("one\ntwo", "eins zwei") == [("one two", "eins zwei")]
    assert not is_text("%s: %-10.3ld %%", "%s: %-10.3ld %%")
    assert not is_text("%(name)s {0}", "%(name)s: {0}")
    assert not is_text("GNOME", "GNOME") and not is_text("Open", "")
    assert is_text("%s: not found", "%s: nicht gefunden")


def test_corpus_is_aligned_split_by_catalogue_and_clean(tiny_locale_dir, tiny_translation_corpus):
    raw, manifest = tiny_translation_corpus.raw_dir, read_manifest(tiny_translation_corpus.raw_dir.parent)
    sources = {}
    for split in SPLITS:
        en, de = lines_of(raw / f"{split}.en"), lines_of(raw / f"{split}.de")
        assert len(en) == len(de) == manifest["stats"][split]["pairs"] > 0
        assert all(is_text(s, t) and s == " ".join(s.split()) for s, t in zip(en, de))
        sources[split] = set(en)
        assert len(sources[split]) == len(en), f"{split}: each English message once"
    assert not sources["train"] & (sources["valid"] | sources["test"]) and not sources["valid"] & sources["test"]
    english = {path.stem: {s for msgid, msgstr in read_mo(path) for s, t in message_pairs(msgid, msgstr)}
               for path in catalogues(tiny_locale_dir, "de")}  # fmt: skip
    for domain, messages in english.items():  # each catalogue lies whole in one split (shared messages aside)
        own = messages - set().union(*(other for d, other in english.items() if d != domain))
        assert sum(bool(own & sources[split]) for split in SPLITS) == 1, domain
    assert sum(manifest["stats"][split]["catalogues"] for split in SPLITS) == len(TINY_CATALOGUES)
    assert "Usage:" in sources["train"] | sources["valid"] | sources["test"]  # a line of a multi-line help text


def test_assign_splits_fills_valid_then_test_with_catalogues_that_fit():
    # 1059 pairs: at most round(0.05 * 1059) = 53 each in valid and test, whole catalogues, in the given order
    sizes = {"a": 50, "b": 3, "c": 4, "big": 950, "d": 50, "e": 2}
    assert assign_splits(sizes) == {"a": "valid", "b": "valid", "c": "test", "big": "train", "d": "train", "e": "test"}
    many = {f"c{i}": 100 for i in range(1000)}  # 100,000 pairs: 5% would be 5000; the cap holds
    splits = list(assign_splits(many).values())
    assert splits.count("valid") * 100 == splits.count("test") * 100 == MAX_HELD_OUT_PAIRS


def test_this_machines_german_catalogues_split_about_5_percent_each(tiny_locale_dir):  # skips without them
    by_split = split_pairs(SYSTEM_LOCALE_DIR, "de", seed=0, max_words=None)
    total = sum(len(pairs) for pairs in by_split.values())
    for split in ("valid", "test"):
        assert 0.04 * total < len(by_split[split]) <= min(0.05 * total, MAX_HELD_OUT_PAIRS) + 1, split


def test_joint_vocabulary_and_fairseq_translation_data(tiny_translation_corpus):
    paths, pieces = tiny_translation_corpus, tiny_translation_corpus.raw_dir.parent / "pieces"
    sp = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    assert sp.decode(lines_of(pieces / "train.de")[0].split()) == lines_of(paths.raw_dir / "train.de")[0]
    train_pieces = {p for lang in ("en", "de") for line in lines_of(pieces / f"train.{lang}") for p in line.split()}
    src_dict = Dictionary.load(str(paths.data_bin / "dict.en.txt"))
    tgt_dict = Dictionary.load(str(paths.data_bin / "dict.de.txt"))
    assert src_dict.symbols == tgt_dict.symbols  # --joined-dictionary: --share-all-embeddings works
    assert {s for s in src_dict.symbols[src_dict.nspecial :] if not s.startswith("madeupword")} == train_pieces
    for lang, dictionary in (("en", src_dict), ("de", tgt_dict)):
        binarized = data_utils.load_indexed_dataset(str(paths.data_bin / f"valid.en-de.{lang}"), dictionary)
        lines = lines_of(pieces / f"valid.{lang}")
        assert len(binarized) == len(lines)
        for item, line in zip(binarized, lines):
            expected = [dictionary.index(p) for p in line.split()] + [dictionary.eos()]
            assert item.tolist() == expected


def test_reversed_pair_swaps_the_sides(tiny_locale_dir, tiny_translation_corpus, tmp_path):
    by_split = split_pairs(tiny_locale_dir, "de", seed=0, max_words=None)
    _write_text(by_split, tmp_path / "raw", ("de", "en"), reverse=True)
    for split in SPLITS:
        for lang in ("de", "en"):
            assert lines_of(tmp_path / "raw" / f"{split}.{lang}") == lines_of(tiny_translation_corpus.raw_dir / f"{split}.{lang}")


@pytest.mark.parametrize("args, message", [
    (["--source-lang", "fr", "--target-lang", "de"], "unknown language pair fr-de: gettext catalogues pair English"),
    (["--target-lang", "xx"], "no catalogues for xx: .*LC_MESSAGES holds no .mo files; languages with catalogues here: de"),
    (["--max-chars", "5000"], "--max-chars and --python-docs apply to the lm and bert formats; translation reads "
                              r"the gettext catalogues \(--max-words caps them\)"),
    (["--python-docs"], "--max-chars and --python-docs apply to the lm and bert formats"),
])  # fmt: skip
def test_cli_errors_name_the_problem(tiny_locale_dir, tmp_path, args, message):
    argv = ["--out", str(tmp_path / "out"), "--format", "translation", "--locale-dir", str(tiny_locale_dir), *args]
    with pytest.raises(SystemExit, match=f"normformer-build-corpus: error: {message}"):
        build_corpus_main(argv)
    assert not (tmp_path / "out").exists()


def test_too_little_text_is_an_error(tiny_locale_dir, tmp_path):  # tiny_locale_dir: skip without catalogues
    locale_dir = link_catalogues(tmp_path / "locale", "de", TINY_CATALOGUES[:2])
    with pytest.raises(ValueError, match="too little text: the train split has \\d+ sentence pairs, fewer than 100"):
        build_translation_corpus(tmp_path / "out", locale_dir=locale_dir, vocab_size=100)
    assert not (tmp_path / "out").exists()
