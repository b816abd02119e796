"""Bad translation data meets a one-line error before anything is built (checks.py, LanguagePairNeeds)."""
import shutil

import pytest
from fairseq import options

from fairseq_normformer.checks import check_config
from tests.cli.translation_corpus import SRC, TGT

from .models.translation_builders import language_dictionary
from tests.conftest import fairseq_config


@pytest.fixture
def data_dir(tmp_path):
    """A data directory with the fwd-rev pair's dictionaries (the same symbols) and empty-but-present splits."""
    for lang in (SRC, TGT):
        language_dictionary("w").save(str(tmp_path / f"dict.{lang}.txt"))
        for split in ("train", "valid"):
            for ext in ("bin", "idx"):
                (tmp_path / f"{split}.{SRC}-{TGT}.{lang}.{ext}").write_bytes(b"x")
    return tmp_path


def check(data_dir, *flags):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data_dir), "--task", "translation", "--arch",
                                                "normformer_transformer", *flags])  # fmt: skip
    check_config(fairseq_config(args), on_cpu=True, cli="fairseq_cli.train")


def test_a_complete_pair_passes_given_or_inferred(data_dir):
    check(data_dir, "-s", SRC, "-t", TGT, "--share-all-embeddings")
    check(data_dir)  # the pair inferred from the file names, as fairseq does


def test_a_missing_dictionary_is_named(data_dir):
    (data_dir / f"dict.{TGT}.txt").unlink()
    with pytest.raises(ValueError, match=rf"^--target-lang {TGT}: .* has no dictionary dict.{TGT}.txt"):
        check(data_dir, "-s", SRC, "-t", TGT)


def test_an_unknown_language_pair_lists_the_known_ones(data_dir):
    with pytest.raises(ValueError, match=rf"--target-lang de: .* no dictionary dict.de.txt .*pairs: {SRC}-{TGT}\)"):
        check(data_dir, "-s", SRC, "-t", "de")


def test_no_pair_to_infer(tmp_path):
    with pytest.raises(ValueError, match="no '<split>.<src>-<tgt>.<lang>' files .* pass --source-lang"):
        check(tmp_path)


def test_a_missing_split_of_one_language(data_dir):
    (data_dir / f"valid.{SRC}-{TGT}.{TGT}.bin").unlink()
    with pytest.raises(ValueError, match=rf"valid.{SRC}-{TGT}.{TGT}.bin' of split 'valid' does not exist"):
        check(data_dir, "-s", SRC, "-t", TGT)


def test_a_pair_binarized_the_other_way_round_is_found(data_dir):
    for path in data_dir.glob(f"*.{SRC}-{TGT}.*"):
        shutil.move(path, data_dir / path.name.replace(f"{SRC}-{TGT}", f"{TGT}-{SRC}"))
    check(data_dir, "-s", SRC, "-t", TGT)


def test_shared_embeddings_with_two_dictionaries(data_dir):
    language_dictionary("other").save(str(data_dir / f"dict.{TGT}.txt"))
    check(data_dir, "-s", SRC, "-t", TGT)  # without --share-all-embeddings two dictionaries are fine
    with pytest.raises(ValueError, match=rf"--share-all-embeddings needs one dictionary .* dict.{SRC}.txt .* "
                                         rf"dict.{TGT}.txt .* differ: .*--joined-dictionary"):  # fmt: skip
        check(data_dir, "-s", SRC, "-t", TGT, "--share-all-embeddings")
