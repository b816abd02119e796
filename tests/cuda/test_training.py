"""Every model family trained by fairseq-train on the GPU (docs/gpu.md), with --fp16 and with --bf16, on the CPU
tests' tiny corpora: the causal LM with each normalization scheme, RoBERTa (masked_lm), BERT with NSP (mlm_nsp),
translation, and extractive QA fine-tuned from the session's pre-trained BERT. Each trains 20 updates saving at
update 10: the losses are finite and fall, and a second run resumed from the update-10 checkpoint logs the
uninterrupted run's loss at update 11 and, to within the rounding of the master weights, at updates 12-20.
normformer-export-hf of a CUDA-trained NormFormer LM gives fairseq's logits on the GPU."""
import math
import shutil

import pytest
import torch

from fairseq_normformer.corpus.finetune_tasks import build_finetune_data

from ..cli.translation_corpus import SRC, TGT, build_reversal_corpus
from ..conftest import TINY, USER_DIR, built_once, run_cli
from ..distributed.fairseq_runs import logged_updates

pytestmark = pytest.mark.cuda
UPDATES, SAVED_AT = 20, 10
MASTER_WEIGHT_DRIFT = 0.01  # of a logged loss after a mixed-precision resume (see the test)
PRECISIONS = ["--fp16", "--bf16"]
NORMFORMER = ["--scale-attn", "--scale-fc", "--scale-heads"]
TINY_LM = ["--arch", "normformer_lm", "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim",
           "64", "--decoder-attention-heads", "4", "--tokens-per-sample", "64"]  # fmt: skip
SCHEMES = {"preln": [], "postln": ["--post-ln"], "normformer": NORMFORMER, "sandwich": ["--sandwich-norm"],
           "qknorm": ["--qk-norm"], "rmsnorm": ["--norm-type", "rmsnorm"], "dyt": ["--norm-type", "dyt"],
           "deepnorm": ["--post-ln", "--deepnorm"]}  # fmt: skip  (README's normalization schemes)


def common(save_dir) -> list:
    return ["--user-dir", USER_DIR, "--optimizer", "adam", "--lr", "3e-3", "--batch-size", "8", "--num-workers", "0",
            "--required-batch-size-multiple", "1", "--log-format", "json", "--log-interval", "1", "--seed", "1",
            "--disable-validation", "--max-update", UPDATES, "--save-interval-updates", SAVED_AT,
            "--no-epoch-checkpoints", "--save-dir", save_dir]  # fmt: skip


def lm_args(corpora, scheme):
    return [corpora["lm"], "--task", "language_modeling", *TINY_LM, *SCHEMES[scheme]], []


def roberta_args(corpora):
    return [corpora["bert"], "--task", "masked_lm", "--criterion", "masked_lm", "--arch", "normformer_roberta_base",
            *TINY, "--tokens-per-sample", "64"], []  # fmt: skip


def bert_nsp_args(corpora):
    return [corpora["bert"], "--task", "mlm_nsp", "--criterion", "mlm_nsp", "--arch", "normformer_bert_base", *TINY,
            "--tokens-per-sample", "64"], []  # fmt: skip


def translation_args(corpora):
    sizes = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
             "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
             "--decoder-attention-heads", "4", "--share-all-embeddings"]  # fmt: skip  (tests/cli/test_translation_e2e.py)
    return [corpora["translation"], "--task", "translation", "-s", SRC, "-t", TGT, "--arch",
            "normformer_transformer_iwslt_de_en", *sizes, "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1"], []  # fmt: skip


def qa_args(corpora):
    """SQuAD 2.0-style fine-tuning (tests/cli/test_finetune_e2e.py); the pre-trained checkpoint is loaded by the
    first run only (a resumed run reads its own checkpoint_last.pt)."""
    bert = corpora["bert_corpus"]
    args = [corpora["squad2"], "--task", "extractive_qa", "--criterion", "extractive_qa", "--arch", "postln_bert_base",
            *TINY, "--max-positions", "64", "--max-seq-length", "64", "--spm-model", bert.spm_model, "--dict",
            bert.data_bin / "dict.txt", "--version-2-with-negative", "--doc-stride", "16"]  # fmt: skip
    return args, ["--restore-file", corpora["pretrained_bert"], "--reset-optimizer", "--reset-dataloader", "--reset-meters"]


FAMILIES = {**{f"lm_{s}": (lambda corpora, s=s: lm_args(corpora, s)) for s in SCHEMES}, "roberta": roberta_args,
            "bert_nsp": bert_nsp_args, "translation": translation_args, "qa": qa_args}  # fmt: skip


@pytest.fixture(scope="session")
def corpora(tiny_lm_corpus, tiny_bert_corpus, swap_run, tmp_path_factory):
    def squad2(out):
        build_finetune_data(out, "squad2", max_chars=8_000)
        return out

    return {"lm": tiny_lm_corpus.data_bin, "bert": tiny_bert_corpus.data_bin, "bert_corpus": tiny_bert_corpus,
            "pretrained_bert": swap_run[0], "squad2": built_once(tmp_path_factory, "squad2", squad2),
            "translation": built_once(tmp_path_factory, "reversal",
                                      lambda out: build_reversal_corpus(tiny_lm_corpus, out))}  # fmt: skip


def losses(stdout: str) -> dict:
    return {update: float(stats["loss"]) for update, stats in logged_updates(stdout).items()}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_trains_on_the_gpu_and_resumes_equal(family, precision, corpora, tmp_path):
    args, first_run_only = FAMILIES[family](corpora)
    first = run_cli(["fairseq-train", *args, *common(tmp_path / "run"), precision, *first_run_only]).stdout
    assert "CUDA enviroments for all 1 workers" in first  # fairseq's own spelling: it trained on the GPU
    logged = losses(first)
    assert sorted(logged) == list(range(1, UPDATES + 1)), sorted(logged)  # no update skipped (no fp16 overflow)
    assert all(math.isfinite(loss) for loss in logged.values())
    assert sum(logged[u] for u in (18, 19, 20)) < sum(logged[u] for u in (1, 2, 3))
    (tmp_path / "resumed").mkdir()
    (saved,) = (tmp_path / "run").glob(f"checkpoint_*_{SAVED_AT}.pt")
    shutil.copy(saved, tmp_path / "resumed" / "checkpoint_last.pt")
    resumed = losses(run_cli(["fairseq-train", *args, *common(tmp_path / "resumed"), precision]).stdout)
    assert sorted(resumed) == list(range(SAVED_AT + 1, UPDATES + 1))
    # Update 11 is the same forward pass (losses logged to 3 decimals). fairseq's checkpoints keep the model's
    # fp16/bf16 weights, not FP16Optimizer's fp32 master copy, which a resume rebuilds from them: the later
    # updates drift by that rounding (at most 0.006 in these families run with --cpu, 2026-11-28), far below
    # what a lost optimizer state or data position gives.
    assert abs(resumed[SAVED_AT + 1] - logged[SAVED_AT + 1]) <= 1e-3, (resumed, logged)
    assert all(abs(resumed[u] - logged[u]) <= MASTER_WEIGHT_DRIFT for u in resumed), (resumed, logged)


@torch.no_grad()
def test_export_hf_of_a_cuda_trained_lm_gives_fairseqs_logits_on_the_gpu(corpora, tmp_path):
    from transformers import AutoModelForCausalLM

    from fairseq_normformer.models import NormFormerLanguageModel

    args, _ = lm_args(corpora, "normformer")
    run_cli(["fairseq-train", *args, *common(tmp_path / "run"), "--fp16"])
    run_cli(["normformer-export-hf", tmp_path / "run" / "checkpoint_last.pt", tmp_path / "hf"])
    hub = NormFormerLanguageModel.from_pretrained(str(tmp_path / "run"), checkpoint_file="checkpoint_last.pt",
                                                  data_name_or_path=str(corpora["lm"]))  # fmt: skip
    fairseq_model = hub.models[0].cuda().float()  # in eval mode already (the hub made it generation-fast)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).cuda().float().eval()
    tokens = torch.randint(4, len(hub.task.source_dictionary), (3, 40), generator=torch.Generator().manual_seed(0)).cuda()
    torch.testing.assert_close(hf(tokens).logits, fairseq_model(tokens)[0], rtol=1e-4, atol=1e-4)
