"""meta_trace.py: one training step on the meta device (no memory) through fairseq's own tasks,
criterions and data: a tiny model of every family runs with no tensor on another device, a CPU
tensor made inside forward is stopped with one line (as a GPU step would fail), and the counts equal
memory_plan.py's explicit formulas; the paper's 125M through ``normformer-paper-settings --trace``."""
import json
import re

import pytest
import torch
from fairseq import options, tasks, utils

from fairseq_normformer import memory_plan, meta_trace, paper
from fairseq_normformer.checks import BadInput
from fairseq_normformer.corpus.finetune_tasks import build_finetune_data
from fairseq_normformer.memory_plan import ModelShape

from .conftest import REPO_ROOT, TINY, fairseq_config

L, D, F, H, T, B, V = 2, 64, 256, 4, 32, 3, 1000
LM_SHAPE = ["--decoder-layers", str(L), "--decoder-embed-dim", str(D), "--decoder-ffn-embed-dim", str(F),
            "--decoder-attention-heads", str(H)]  # fmt: skip
ENCODER = [*TINY, "--optimizer", "adam"]


@pytest.mark.parametrize("normformer", [False, True])
@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_tiny_lm_step_counts_what_the_formulas_say(normformer, checkpoint):
    arch = "normformer_lm_gpt3_small" if normformer else "preln_lm_gpt3_small"
    step = meta_trace.lm_step(arch, B, T, 0.1, checkpoint, V, LM_SHAPE)
    shape = ModelShape(L, D, F, H, V, normformer=normformer)
    assert step.parameters == sum(memory_plan.parameter_tensors(shape))
    assert step.flops == B * T * memory_plan.flops_per_token(shape, T, checkpoint)
    # fp16 activations, CUDA's 1-byte dropout masks; checkpointed: backward recomputes each layer once,
    # and in it the torch FFN LN recomputes its GELU's fp32 input (4 bytes x F a token)
    planned = memory_plan.activation_bytes(shape, B, T, 2, checkpoint, dropout_mask=1)
    one_layer = step.saved_backward_bytes // L if checkpoint else 0
    recomputed_gelu = B * T * 4 * F if checkpoint and normformer else 0
    assert step.saved_forward_bytes + one_layer == pytest.approx(planned + recomputed_gelu, rel=0.01)
    # LayerNorm: 5 FLOPs an element forward, 10 backward, 5 more in a checkpointed layer's recompute
    layer_norm_elements = 2 * D + (D + F if normformer else 0)
    assert step.layer_norm_flops == B * T * ((15 + 5 * checkpoint) * L * layer_norm_elements + 15 * D)


def test_a_cpu_tensor_made_inside_forward_stops_the_step_with_one_line():
    def add_cpu_bias(module, inputs, output):
        if isinstance(module, torch.nn.Linear) and module.out_features == F:  # FC1
            return output + torch.ones(F)  # the bug: a constant made on the CPU inside forward
        return output

    hook = torch.nn.modules.module.register_module_forward_hook(add_cpu_bias)
    try:
        with pytest.raises(BadInput) as error:
            meta_trace.lm_step("normformer_lm_gpt3_small", B, T, 0.0, False, V, LM_SHAPE)
    finally:
        hook.remove()
    message = str(error.value)
    assert "\n" not in message
    assert re.match(r"aten\.add\.Tensor mixes a tensor on cpu into the meta-device step .* at .*test_meta_trace\.py:\d+", message)


def meta_step(argv: list):
    """fairseq-train's task and first batch of ``argv`` (real data, on the meta device); fairseq's
    "any padding?" answered yes, so the padded paths run."""
    cfg = fairseq_config(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    model, criterion = meta_trace.build_on_meta(task, cfg)
    task.load_dataset("train", combine=False, epoch=1)
    batches = task.get_batch_iterator(task.dataset("train"), max_sentences=2, max_positions=task.max_positions(),
                                      ignore_invalid_inputs=True)  # fmt: skip
    sample = utils.apply_to_sample(lambda t: t.to("meta"), next(batches.next_epoch_itr(shuffle=False)))
    return meta_trace.trace_step(task, cfg, model, criterion, sample, padded=True)


def test_lm_step_places_every_tensor_on_the_inputs_device(tiny_lm_corpus):
    meta_step([str(tiny_lm_corpus.data_bin), "--task", "language_modeling", "--arch", "normformer_lm_gpt3_small",
               *LM_SHAPE, "--tokens-per-sample", "32", "--optimizer", "adam"])  # fmt: skip


@pytest.mark.parametrize("task,criterion,arch", [("masked_lm", "masked_lm", "normformer_roberta_base"),
                                                  ("mlm_nsp", "mlm_nsp", "normformer_bert_base")])  # fmt: skip
def test_masked_lm_steps_place_every_tensor_on_the_inputs_device(tiny_bert_corpus, task, criterion, arch):
    meta_step([str(tiny_bert_corpus.data_bin), "--task", task, "--criterion", criterion, "--arch", arch, *ENCODER,
               "--tokens-per-sample", "32"])


def test_translation_step_places_every_tensor_on_the_inputs_device(tiny_translation_corpus):
    meta_step([str(tiny_translation_corpus.data_bin), "--task", "translation", "--arch",
               "normformer_transformer_iwslt_de_en", "--encoder-layers", "2", "--decoder-layers", "2",
               "--criterion", "label_smoothed_cross_entropy", "--optimizer", "adam"])  # fmt: skip


@pytest.mark.parametrize("fmt,task,flags", [("squad2", "extractive_qa", ["--version-2-with-negative"]),
                                             ("conll", "token_classification", [])])  # fmt: skip
def test_finetuning_heads_place_every_tensor_on_the_inputs_device(tiny_bert_corpus, tmp_path, fmt, task, flags):
    build_finetune_data(tmp_path / fmt, fmt, max_chars=2_000)
    meta_step([str(tmp_path / fmt), "--task", task, "--criterion", task, "--arch", "normformer_bert_base", *ENCODER,
               "--max-positions", "64", "--max-seq-length", "64", "--spm-model", str(tiny_bert_corpus.spm_model),
               "--dict", str(tiny_bert_corpus.data_bin / "dict.txt"), *flags])  # fmt: skip


def model_page_parameters() -> dict:
    """docs/model.md's table of the Pre-LN presets' parameters and NormFormer's addition, by size."""
    page = (REPO_ROOT / "docs" / "model.md").read_text()
    rows = re.findall(r"^\| gpt3_\w+ \((\w+\.?\w*)\) \|[^|]+\|[^|]+\|[^|]+\| ([\d,]+) \| ([\d,]+) \|$", page, re.M)
    return {size: (int(base.replace(",", "")), int(extra.replace(",", ""))) for size, base, extra in rows}


@pytest.mark.slow
def test_the_papers_125m_traced_meets_the_issues_targets(capsys):
    paper.main(["--trace", "--size", "125M"])
    base, norm = json.loads(capsys.readouterr().out)
    page_base, page_extra = model_page_parameters()["125M"]
    assert (base["parameters"], norm["parameters"]) == (page_base, page_base + page_extra)
    for r in (base, norm):
        assert r["flops_per_token"] == pytest.approx(r["flops_per_token_formula"], rel=0.05)
        assert r["saved_activation_bytes"] == pytest.approx(r["planned_activation_bytes"], rel=0.15)
    total = {r["model"]: r["flops_per_token"] + r["layer_norm_flops_per_token"] for r in (base, norm)}
    assert 0 < total["normformer"] / total["baseline"] - 1 < 0.02
