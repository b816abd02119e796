"""The mlm_nsp criterion against an explicit formula, its split invariance (data parallel and
gradient accumulation) and its logged metrics."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq.logging import metrics
from omegaconf import OmegaConf

from fairseq_normformer.criterions.mlm_nsp import MlmNspCriterion, MlmNspCriterionConfig
from fairseq_normformer.data.masking import span_boundaries

from ..models.encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask, fake_task


@pytest.fixture(scope="module")
def setup():
    d = dictionary_with_mask()
    torch.manual_seed(0)
    model = build_encoder_model("normformer_bert_base", d)
    return d, model.eval()


def criterion(d, nsp_loss_weight=1.0):
    cfg = OmegaConf.structured(MlmNspCriterionConfig(nsp_loss_weight=nsp_loss_weight))
    return MlmNspCriterion(cfg, fake_task(d))


def make_batch(d, n_rows=6, width=20, seed=0):
    """Rows of different lengths with 1..4 targets each (a different number per row)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(d.nspecial, len(d) - 1, (n_rows, width), generator=g)
    target = torch.full_like(tokens, d.pad())
    for i in range(n_rows):
        length = width - 2 * i
        tokens[i, 0], tokens[i, length // 2], tokens[i, length - 1] = d.bos(), d.eos(), d.eos()
        tokens[i, length:] = d.pad()
        positions = torch.randperm(length // 2 - 1, generator=g)[: 1 + i % 4] + 1
        target[i, positions] = tokens[i, positions]
        tokens[i, positions[0]] = d.index("<mask>")
    return {
        "net_input": {"src_tokens": tokens},
        "target": target,
        "nsp_target": torch.randint(0, 2, (n_rows,), generator=g),
        "ntokens": int(tokens.ne(d.pad()).sum()),
        "nsentences": n_rows,
    }


def sub_batch(sample, rows):
    return {
        "net_input": {"src_tokens": sample["net_input"]["src_tokens"][rows]},
        **{k: sample[k][rows] for k in ("target", "nsp_target", "span_boundaries") if k in sample},
        "ntokens": int(sample["net_input"]["src_tokens"][rows].ne(1).sum()),
        "nsentences": len(rows),
    }


def test_loss_is_per_sequence_mlm_mean_plus_weighted_nsp(setup):
    d, model = setup
    sample = make_batch(d)
    loss, sample_size, _ = criterion(d, nsp_loss_weight=0.5)(model, sample)

    logits, extra = model(sample["net_input"]["src_tokens"])  # all positions, (B, T, V)
    expected = 0.0
    for i in range(sample["nsentences"]):
        positions = sample["target"][i].ne(d.pad())
        mlm = F.cross_entropy(logits[i][positions], sample["target"][i][positions])
        nsp = F.cross_entropy(extra["nsp_logits"][i : i + 1], sample["nsp_target"][i : i + 1])
        expected += mlm + 0.5 * nsp
    assert sample_size == sample["nsentences"]
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)


def test_only_masked_positions_go_through_the_lm_head(setup):
    d, model = setup
    sample = make_batch(d)
    seen = []
    hook = model.encoder.lm_head.dense.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0].shape))
    try:
        criterion(d)(model, sample)
    finally:
        hook.remove()
    assert seen == [torch.Size([int(sample["target"].ne(d.pad()).sum()), model.args.encoder_embed_dim])]


def gradients(model, parts, crit):
    """fairseq's trainer: sum the losses of all parts (workers x accumulation steps), then divide
    the gradient by the summed sample sizes."""
    model.zero_grad()
    total_size = 0
    for part in parts:
        loss, sample_size, _ = crit(model, part)
        loss.backward()
        total_size += sample_size
    return [p.grad / total_size for p in model.parameters() if p.grad is not None]


def test_normalization_does_not_depend_on_how_the_batch_is_split(setup):
    d, model = setup
    sample, crit = make_batch(d), criterion(d, nsp_loss_weight=0.7)
    whole = gradients(model, [sample], crit)
    split = gradients(model, [sub_batch(sample, [0, 1]), sub_batch(sample, [2]), sub_batch(sample, [3, 4, 5])], crit)
    for g_whole, g_split in zip(whole, split):
        torch.testing.assert_close(g_whole, g_split, atol=1e-6, rtol=1e-4)


def logged(logging_outputs):
    with metrics.aggregate() as agg:
        MlmNspCriterion.reduce_metrics(logging_outputs)
        return {k: v for k, v in agg.get_smoothed_values().items()}


def test_logs_mlm_and_nsp_accuracy_and_losses_separately(setup):
    d, model = setup
    sample, crit = make_batch(d), criterion(d)
    with torch.no_grad():
        _, _, log = crit(model, sample)
        logits, extra = model(sample["net_input"]["src_tokens"])
    masked = sample["target"].ne(d.pad())
    mlm_nll = F.cross_entropy(logits[masked], sample["target"][masked], reduction="sum")
    values = logged([log])
    assert values["mlm_loss"] == pytest.approx(mlm_nll.item() / masked.sum().item() / math.log(2), abs=1e-3)
    assert values["mlm_ppl"] == pytest.approx(2 ** values["mlm_loss"], rel=1e-2)
    nsp_nll = F.cross_entropy(extra["nsp_logits"], sample["nsp_target"]).item()
    assert values["nsp_loss"] == pytest.approx(nsp_nll / math.log(2), abs=1e-3)
    mlm_correct = (logits[masked].argmax(-1) == sample["target"][masked]).float().mean().item()
    assert values["mlm_accuracy"] == pytest.approx(100 * mlm_correct, abs=0.01)
    nsp_correct = (extra["nsp_logits"].argmax(-1) == sample["nsp_target"]).float().mean().item()
    assert values["nsp_accuracy"] == pytest.approx(100 * nsp_correct, abs=0.01)

    # summed over workers: the logs of the parts reduce to the same values as the whole batch's
    with torch.no_grad():
        parts = [crit(model, sub_batch(sample, rows))[2] for rows in ([0, 1, 2], [3, 4, 5])]
    summed = {k: sum(p[k] for p in parts) for k in parts[0]}
    for key, value in logged([summed]).items():
        assert value == pytest.approx(values[key], abs=1e-2), key


def test_a_model_without_nsp_head_is_an_error():
    d = dictionary_with_mask()
    model = build_encoder_model("normformer_roberta", d)
    with pytest.raises(ValueError, match="next-sentence head"):
        criterion(d)(model, make_batch(d))


@pytest.fixture(scope="module")
def spanbert_setup():
    """No NSP, SBO on: the model of --no-nsp --sbo-loss-weight 1, batches without NSP labels."""
    d = dictionary_with_mask()
    torch.manual_seed(0)
    flags = TINY_ENCODER + ["--no-nsp", "--sbo-loss-weight", "1"]
    model = build_encoder_model("normformer_bert_base", d, flags, task=("--task", "mlm_nsp", "--criterion", "mlm_nsp"))
    return d, model.eval()


def spanbert_batch(d):
    sample = make_batch(d)
    del sample["nsp_target"]
    boundaries = [span_boundaries(t.numpy(), d.pad()) for t in sample["target"]]
    sample["span_boundaries"] = torch.from_numpy(np.stack(boundaries))
    return sample


def sbo_criterion(d, weight):
    return MlmNspCriterion(OmegaConf.structured(MlmNspCriterionConfig(sbo_loss_weight=weight)), fake_task(d))


def test_no_nsp_loss_is_per_sequence_mlm_mean_plus_weighted_sbo_mean_and_logs_no_nsp(spanbert_setup):
    d, model = spanbert_setup
    sample = spanbert_batch(d)
    loss, sample_size, log = sbo_criterion(d, 0.3)(model, sample)
    masked = sample["target"].ne(d.pad())
    with torch.no_grad():
        logits, _ = model(sample["net_input"]["src_tokens"])  # (B, T, V)
        _, extra = model(sample["net_input"]["src_tokens"], masked_tokens=masked, span_boundaries=sample["span_boundaries"])
    rows = masked.nonzero()[:, 0]
    expected = 0.0
    for i in range(sample["nsentences"]):
        targets = sample["target"][i][masked[i]]
        mlm = F.cross_entropy(logits[i][masked[i]], targets)
        sbo = F.cross_entropy(extra["sbo_logits"][rows == i], targets)
        expected += mlm + 0.3 * sbo
    assert sample_size == sample["nsentences"]
    torch.testing.assert_close(loss.detach(), expected, atol=1e-5, rtol=1e-5)

    values = logged([log])
    assert not any(k.startswith("nsp") for k in list(log) + list(values))
    sbo_nll = F.cross_entropy(extra["sbo_logits"], sample["target"][masked]).item()
    assert values["sbo_loss"] == pytest.approx(sbo_nll / math.log(2), abs=1e-3)
    sbo_correct = (extra["sbo_logits"].argmax(-1) == sample["target"][masked]).float().mean().item()
    assert values["sbo_accuracy"] == pytest.approx(100 * sbo_correct, abs=0.01)
    assert {"mlm_loss", "mlm_accuracy", "mlm_ppl"} <= values.keys()


def test_sbo_normalization_does_not_depend_on_how_the_batch_is_split(spanbert_setup):
    d, model = spanbert_setup
    crit = sbo_criterion(d, 1.0)
    sample = spanbert_batch(d)
    whole = gradients(model, [sample], crit)
    split = gradients(model, [sub_batch(sample, rows) for rows in ([0, 1], [2], [3, 4, 5])], crit)
    assert len(whole) == len(split) and any(g.abs().sum() > 0 for g in whole)
    for g_whole, g_split in zip(whole, split):
        torch.testing.assert_close(g_whole, g_split, atol=1e-6, rtol=1e-4)


def test_sbo_weight_without_an_sbo_head_is_an_error(setup):
    d, model = setup
    with pytest.raises(ValueError, match="span boundary head"):
        sbo_criterion(d, 1.0)(model, {**make_batch(d), "span_boundaries": torch.zeros(6, 20, 2, dtype=torch.long)})
