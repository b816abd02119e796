"""A real fairseq-train checkpoint (the zero-shot fixtures' NormFormer LM) through
``normformer-export-hf --spm-model``: AutoTokenizer gives the scorer's token ids, the exported model
the checkpoint's logits and fairseq's greedy generation, and lm-evaluation-harness's own ``hf`` model
the same log-likelihoods as our ``normformer`` adapter on the local task files; the tokenizer decodes as
SentencePiece and transformers' text-generation pipeline reads what generate() and decode() read."""

import pytest
import sentencepiece as spm
import torch
from fairseq import checkpoint_utils
from fairseq.dataclass.configs import GenerationConfig
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

from tests.conftest import run_cli

from .test_lm_eval_adapter import local_task_yaml

lm_eval = pytest.importorskip("lm_eval")  # requirements/test.txt pins it

TEXTS = ["Return the number of items.", "A  path"]


@pytest.fixture(scope="module")
def export_dir(tiny_checkpoint, tiny_lm_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf_export") / "normformer"
    result = run_cli(["normformer-export-hf", tiny_checkpoint, out, "--spm-model", tiny_lm_corpus.spm_model])
    assert f"wrote {out}" in result.stdout  # its log
    return out


@pytest.fixture(scope="module")
def fairseq_lm(tiny_checkpoint):
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(tiny_checkpoint)])
    return models[0].eval(), task


@pytest.mark.slow
def test_autotokenizer_gives_the_checkpoints_ids_and_text_back(export_dir, scorer):
    tokenizer = AutoTokenizer.from_pretrained(export_dir, trust_remote_code=True)
    d = scorer.dictionary
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id) == (
        d.eos(), d.eos(), d.pad(), d.unk()
    )
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        assert ids == [d.eos()] + scorer.encode(text)  # an LM's text starts after </s>
        assert tokenizer.decode(ids, skip_special_tokens=True) == scorer.decode(ids)


@torch.no_grad()
def test_exported_checkpoint_gives_its_logits_and_fairseqs_greedy_generation(export_dir, fairseq_lm):
    model, task = fairseq_lm
    tokenizer = AutoTokenizer.from_pretrained(export_dir, trust_remote_code=True)
    hf = AutoModelForCausalLM.from_pretrained(export_dir, trust_remote_code=True).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")  # right padding
    real = batch["attention_mask"].bool()
    theirs = hf(**batch).logits
    torch.testing.assert_close(theirs[real], model(batch["input_ids"])[0][real], atol=1e-5, rtol=0)

    # fairseq-interactive's path: the task's generator with beam 1, the prompt as prefix tokens
    max_len = 40  # fairseq: prompt + new tokens, then a forced </s>
    generator = task.build_generator([model], OmegaConf.merge(OmegaConf.structured(GenerationConfig),
                                                              {"beam": 1, "max_len_b": max_len}))  # fmt: skip
    for text in TEXTS:
        src = tokenizer(text, return_tensors="pt")["input_ids"]  # </s> + the prompt
        sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}}
        ours = task.inference_step(generator, [model], sample)[0][0]["tokens"].tolist()  # prompt + new + </s>
        generated = hf.generate(src, max_new_tokens=max_len + 1 - src.size(1), do_sample=False)[0].tolist()
        assert without_eos(generated[1:], task) == without_eos(ours, task)


# leading and repeated spaces, punctuation, a newline, characters neither SentencePiece nor the dictionary knows
TRICKY_TEXTS = ["  Return the number of items.  ", "x = f(a, b)  # (see: 'doc')!", "def f():\n    return 1",
                "naïve café → 你好 ok"]  # fmt: skip


def test_tokenizer_decodes_as_sentencepiece_and_in_parts_as_a_whole(export_dir, fairseq_lm, tiny_lm_corpus):
    """decode(encode(text)) is SentencePiece's decode of the text's pieces, those the dictionary lacks
    read as its <unk>; decoding a text's ids in two parts and joining them reads the same (what pipelines do)."""
    tokenizer = AutoTokenizer.from_pretrained(export_dir, trust_remote_code=True)
    d = fairseq_lm[1].source_dictionary
    sp = spm.SentencePieceProcessor(model_file=str(tiny_lm_corpus.spm_model))
    held_out = (tiny_lm_corpus.raw_dir / "test.txt").read_text(encoding="utf-8").splitlines()[:20]
    for text in TRICKY_TEXTS + held_out:
        pieces = [p if d.index(p) != d.unk() else sp.id_to_piece(sp.unk_id()) for p in sp.encode(text, out_type=str)]
        ids = tokenizer(text)["input_ids"]  # </s> + the pieces' ids
        whole = tokenizer.decode(ids, skip_special_tokens=True)
        assert whole == sp.decode(pieces), text
        for k in range(2, len(ids)):  # a prompt holds </s> and a piece at least
            parts = [tokenizer.decode(part, skip_special_tokens=True) for part in (ids[:k], ids[k:])]
            assert "".join(parts) == whole, (text, k)
    assert "⁇" in sp.decode(pieces) or not any(d.index(p) == d.unk() for p in pieces)


@torch.no_grad()
def test_text_generation_pipeline_reads_what_generate_and_decode_read(export_dir):
    """transformers' pipeline decodes the new tokens apart from the prompt: the first new piece is forced to
    start a word ("▁...") so that the space between prompt and continuation is at stake."""
    tokenizer = AutoTokenizer.from_pretrained(export_dir, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(export_dir, trust_remote_code=True).eval()
    not_a_word_start = [i for token, i in tokenizer.get_vocab().items() if not token.startswith("▁")]
    settings = dict(max_new_tokens=6, do_sample=False, begin_suppress_tokens=not_a_word_start)
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    for prompt in ["Return the number of", "If the path"]:
        prompt_ids = tokenizer(prompt, return_tensors="pt")
        generated = model.generate(**prompt_ids, **settings)[0]
        assert tokenizer.convert_ids_to_tokens(int(generated[prompt_ids["input_ids"].size(1)])).startswith("▁")
        expected = tokenizer.decode(generated, skip_special_tokens=True)
        assert generator(prompt, **settings)[0]["generated_text"] == expected
        assert expected.startswith(prompt + " ")


def without_eos(tokens, task):
    return tokens[:-1] if tokens[-1] == task.target_dictionary.eos() else tokens


def test_lm_eval_hf_model_agrees_with_our_adapter(export_dir, tiny_checkpoint, tiny_lm_corpus, task_files,
                                                  tmp_path_factory):  # fmt: skip
    pytest.importorskip("accelerate")  # lm_eval's hf model imports it (requirements/test.txt pins it)
    from lm_eval.api.instance import Instance
    from lm_eval.tasks import TaskManager

    from fairseq_normformer.zeroshot.lm_eval_adapter import NormFormerLM

    directory = tmp_path_factory.mktemp("lm_eval_hf_tasks")
    names = ["hellaswag", "openbookqa"]
    for name in names:
        local_task_yaml(directory, name, task_files[name])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        results = lm_eval.simple_evaluate(
            model="hf", model_args=f"pretrained={export_dir},trust_remote_code=True,dtype=float32", device="cpu",
            tasks=[f"{name}_local" for name in names], log_samples=True, bootstrap_iters=0,
            task_manager=TaskManager(include_path=str(directory), include_defaults=False),
        )  # fmt: skip
    adapter = NormFormerLM(checkpoint=str(tiny_checkpoint), spm_model=str(tiny_lm_corpus.spm_model))
    for name in names:
        samples = results["samples"][f"{name}_local"]
        assert len(samples) == 12
        for sample in samples:
            requests = [Instance("loglikelihood", {}, tuple(arguments), 0) for arguments in sample["arguments"]]
            ours = adapter.loglikelihood(requests)
            theirs = [response[0] for response in sample["resps"]]
            assert [logprob for logprob, _ in theirs] == pytest.approx([logprob for logprob, _ in ours], abs=1e-4)
            assert [greedy for _, greedy in theirs] == [greedy for _, greedy in ours]
