"""normformer_transformer end to end: fairseq-train on a tiny parallel corpus (its logged parameter count
against fairseq's own transformer plus the operations table's formula), fairseq-generate's sacrebleu BLEU,
fairseq-interactive translating a sentence, normformer-export-hf's AutoModelForSeq2SeqLM translating as fairseq."""
import re

import pytest
import sentencepiece as spm
import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from fairseq_normformer.analysis.training_log import read_generate_bleu
from fairseq_normformer.modules.operations import OPERATIONS
from tests.cli.test_e2e_lm import json_records, logged_params
from tests.cli.translation_corpus import SRC, TGT, build_reversal_corpus
from tests.conftest import USER_DIR, run_cli
from tests.models.translation_builders import build_translation_model

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

L, D, F, H = 1, 32, 64, 4  # layers a side, model dim, FFN dim, heads
SIZES = ["--encoder-layers", L, "--decoder-layers", L, "--encoder-embed-dim", D, "--decoder-embed-dim", D,
         "--encoder-ffn-embed-dim", F, "--decoder-ffn-embed-dim", F, "--encoder-attention-heads", H,
         "--decoder-attention-heads", H, "--share-all-embeddings"]  # fmt: skip


@pytest.fixture(scope="module")
def data_bin(tiny_lm_corpus, tmp_path_factory):
    return build_reversal_corpus(tiny_lm_corpus, tmp_path_factory.mktemp("reversal"))


@pytest.fixture(scope="module")
def trained(data_bin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("mt_checkpoints")
    out = run_cli(["fairseq-train", data_bin, "--user-dir", USER_DIR, "--task", "translation", "-s", SRC, "-t", TGT,
                   "--arch", "normformer_transformer_iwslt_de_en", *SIZES, "--dropout", "0", "--optimizer", "adam",
                   "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5", "--max-tokens", "800",
                   "--max-update", "30", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                   "--seed", "1", "--num-workers", "0", "--log-format", "json", "--log-interval", "10",
                   "--no-epoch-checkpoints", "--save-dir", save_dir])  # fmt: skip
    return out.stdout, save_dir / "checkpoint_last.pt"


def test_train_logs_fairseqs_parameters_plus_the_formulas(trained, data_bin):
    """NormFormer adds (L_enc + L_dec)·(2d + 2f + H) to fairseq's Pre-LN transformer of the same sizes."""
    dictionary = Dictionary.load(str(data_bin / f"dict.{SRC}.txt"))
    flags = [str(a) for a in SIZES] + ["--encoder-normalize-before", "--decoder-normalize-before"]
    _, baseline = build_translation_model("transformer", flags, dictionary, dictionary)
    added = 2 * L * sum(op.num_params(D, F, H) for op in OPERATIONS if op.in_normformer)
    stdout, _ = trained
    assert logged_params(stdout) == sum(p.numel() for p in baseline.parameters()) + added
    losses = [float(r["loss"]) for r in json_records(stdout, "train_inner")]
    assert len(losses) == 3 and losses[-1] < losses[0], losses


def pairs_in_test_split(data_bin) -> int:
    return len((data_bin.parent / "raw" / f"test.{SRC}").read_text(encoding="utf-8").splitlines())


@pytest.fixture(scope="module")
def decoded(trained, data_bin, tiny_lm_corpus):
    """The output of fairseq-generate (beam 5, lenpen 1.2, sacrebleu) and the stdout of fairseq-interactive."""
    common = [data_bin, "--user-dir", USER_DIR, "--path", trained[1], "-s", SRC, "-t", TGT, "--beam", "5"]
    generate = ["fairseq-generate", *common, "--gen-subset", "test", "--lenpen", "1.2", "--batch-size", "16",
                "--remove-bpe", "sentencepiece", "--scoring", "sacrebleu"]  # fmt: skip
    interactive = ["fairseq-interactive", *common, "--bpe", "sentencepiece",
                   "--sentencepiece-model", tiny_lm_corpus.spm_model]  # fmt: skip
    generated = run_cli(generate)
    translated = run_cli(interactive, input="Return the number of items in the list.\n")
    return generated.stdout + generated.stderr, translated.stdout


def test_generate_translates_every_test_pair_and_prints_a_sacrebleu_bleu(decoded, data_bin):
    """43 pairs in batches of 16 with fairseq's default --required-batch-size-multiple 8: fairseq alone
    translates 40, dropping a last batch of 3 (fixes/batches.py)."""
    stdout, _ = decoded
    pairs = pairs_in_test_split(data_bin)
    assert pairs % 8 != 0
    assert re.search(rf"Translated {pairs} sentences", stdout)
    assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", stdout, flags=re.MULTILINE)) == list(range(pairs))
    assert re.search(r"Generate test with beam=5: BLEU = \d+\.\d+ [\d.]+/[\d.]+/[\d.]+/[\d.]+ \(BP", stdout)


def test_bleu_table_reads_the_bleu_and_the_count_of_generate(decoded, data_bin, tmp_path):
    log = tmp_path / "generate_test.log"
    log.write_text(decoded[0], encoding="utf-8")
    bleu = float(re.search(r"BLEU = ([\d.]+)", decoded[0]).group(1))
    assert read_generate_bleu(log) == {"subset": "test", "bleu": bleu, "sentences": pairs_in_test_split(data_bin)}


def test_interactive_translates_a_sentence(decoded):
    _, stdout = decoded
    assert re.search(r"^S-0\t▁Return ▁the ▁number", stdout, flags=re.MULTILINE), stdout
    assert re.search(r"^H-0\t-?\d+\.\d+\t\S", stdout, flags=re.MULTILINE), stdout  # its pieces
    assert re.search(r"^D-0\t-?\d+\.\d+\t", stdout, flags=re.MULTILINE), stdout  # detokenized


@torch.no_grad()
def test_export_hf_translates_as_fairseq_greedy(trained, data_bin, tiny_lm_corpus, tmp_path):
    """normformer-export-hf on the trained checkpoint: AutoTokenizer gives fairseq's source ids (pieces + </s>),
    generate() greedy equals fairseq's SequenceGenerator with beam 1 token for token, decode() its text."""
    out = tmp_path / "hf"
    result = run_cli(["normformer-export-hf", trained[1], out, "--spm-model", tiny_lm_corpus.spm_model])
    assert f"wrote {out}" in result.stdout  # its log
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(trained[1])])
    model, src_dict, tgt_dict = models[0].eval(), task.source_dictionary, task.target_dictionary
    tokenizer = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    hf = AutoModelForSeq2SeqLM.from_pretrained(out, trust_remote_code=True).eval()

    sp = spm.SentencePieceProcessor(model_file=str(tiny_lm_corpus.spm_model))
    lines = (data_bin.parent / "raw" / f"test.{SRC}").read_text(encoding="utf-8").splitlines()[:4]
    texts = ["Return the number of items in the list."] + [sp.decode(line.split()) for line in lines]
    batch = tokenizer(texts, padding=True, return_tensors="pt")  # right padding
    for row, text in enumerate(texts):
        pieces = " ".join(sp.encode(text, out_type=str))
        expected = src_dict.encode_line(pieces, add_if_not_exist=False, append_eos=True).tolist()
        assert batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist() == expected

    new = 12
    generated = hf.generate(**batch, max_new_tokens=new, do_sample=False)
    src_lengths = batch["attention_mask"].sum(dim=1)
    generator = SequenceGenerator([model], tgt_dict, beam_size=1, max_len_a=0, max_len_b=new)
    hypos = generator.generate([model], {"net_input": {"src_tokens": batch["input_ids"], "src_lengths": src_lengths}})
    for row, hypo in enumerate(hypos):
        ours = hypo[0]["tokens"].tolist()
        theirs = generated[row, 1:].tolist()
        theirs = theirs[: theirs.index(tgt_dict.eos()) + 1] if tgt_dict.eos() in theirs else theirs
        assert theirs == ours[: len(theirs)] and (len(theirs) == new or theirs[-1] == tgt_dict.eos()), (ours, theirs)
        assert tokenizer.decode(theirs, skip_special_tokens=True) == tgt_dict.string(hypo[0]["tokens"], "sentencepiece")
