"""The scale diagnostics (largest attention logit and output RMS per layer, mean |log Z|) against explicit formulas
on tiny models: a 2-layer causal LM and masked LM of dim 32, computed from the models' own inner states."""
import json
import math

import pytest
import torch

from fairseq_normformer.instrumentation.diagnostics import (
    DiagnosticsRecorder,
    allowed_pairs,
    check_diagnosable,
    max_attention_logit,
)
from tests.models.encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask
from tests.models.lm_builders import TINY, _perturb_1d_, normformer_lm, tiny_dictionary

PAD, HEADS, DIM = 1, 4, 32


def padded_tokens(lengths, total, vocab, seed=0):
    """(B, T) tokens of ``lengths``, right-padded with PAD."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, vocab, (len(lengths), total), generator=generator)
    for row, length in enumerate(lengths):
        tokens[row, length:] = PAD
    return tokens


def explicit_logits(layer, x):
    """q·k/sqrt(d_head) by einsum from the layer's projections of its Pre-LN input x (T, B, C) -> (B, H, T, S)."""
    attention = layer.self_attn
    h = layer.self_attn_layer_norm(x)
    q, k = (proj(h).unflatten(-1, (HEADS, DIM // HEADS)).permute(1, 2, 0, 3) for proj in (attention.q_proj, attention.k_proj))
    q, k = attention.q_norm(q), attention.k_norm(k)  # QK-norm, Identity without --qk-norm
    return torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(DIM // HEADS)


def expected_values(layers, inner_states, tokens, predicted_logits, causal):
    """Each quantity by its formula: max over heads and pairs with both tokens real (key <= query when causal), RMS
    over the real tokens of each layer's output, mean |logsumexp| over the predicted tokens."""
    real = tokens.ne(PAD)  # (B, T)
    size = tokens.size(1)
    pairs = real[:, None, :, None] & real[:, None, None, :]
    if causal:
        pairs = pairs & torch.ones(size, size, dtype=torch.bool).tril()
    expected = {"abs_log_z": torch.logsumexp(predicted_logits, -1).abs().mean().item()}
    for i, layer in enumerate(layers):
        logits = explicit_logits(layer, inner_states[i])
        expected[f"attn_logit/layers.{i}"] = logits[pairs.expand_as(logits)].max().item()
        out = inner_states[i + 1].transpose(0, 1)[real]  # (N, C)
        expected[f"layer_rms/layers.{i}"] = out.pow(2).mean().sqrt().item()
    return expected


@pytest.mark.parametrize("causal", [True, False])
def test_padding_and_future_pairs_are_left_out_of_the_largest_logit(causal):
    """Planted: a padded query, a padded key and (causal) a future key whose logits would be the largest."""
    torch.manual_seed(0)
    q, k = torch.randn(2, HEADS, 5, 8), torch.randn(2, HEADS, 5, 8)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, 3:] = True
    q[1, :, 4] *= 100  # a padded query
    k[1, :, 3] *= 100  # a padded key
    k[0, :, 4] *= 100  # the last key: the future of every other query
    logits = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(8)
    real = ~padding
    pairs = real[:, None, :, None] & real[:, None, None, :] & (torch.ones(5, 5).tril().bool() if causal else True)
    expected = logits[pairs.expand_as(logits)].max()
    measured = max_attention_logit(q, k, allowed_pairs(5, padding, causal, q.device))
    assert measured.item() == pytest.approx(expected.item(), rel=1e-6)
    if causal:  # none of the planted pairs counts
        assert measured < logits.max() / 10
    else:  # the last key is a real one's
        assert measured.item() == pytest.approx(logits[0].max().item(), rel=1e-6)


def recorded(model, target, run, update=1):
    recorder = DiagnosticsRecorder(1)
    with recorder.watch(update, model, target, PAD):
        run()
    return recorder.record(update, lr=0.0)


@pytest.mark.parametrize("flags", [[], ["--qk-norm", "--checkpoint-activations"]], ids=["pre-ln", "qk-norm-ckpt"])
def test_causal_lm_diagnostics_match_the_formulas(flags):
    torch.manual_seed(0)
    model = normformer_lm(tiny_dictionary(), flags=TINY + flags)
    _perturb_1d_(model, 0.3)
    tokens = padded_tokens([7, 4], 7, 50)
    with torch.no_grad():
        logits, extra = model(tokens)
        expected = expected_values(model.decoder.layers, extra["inner_states"], tokens, logits[tokens.ne(PAD)], True)

    def train_step():  # forward and backward; activation checkpointing recomputes each layer in backward
        logits, _ = model(tokens)
        logits.sum().backward()

    values = recorded(model, tokens, train_step)
    assert values.keys() == expected.keys()
    for key, value in expected.items():
        assert values[key] == pytest.approx(value, rel=1e-5), key


def test_masked_lm_diagnostics_match_the_formulas():
    torch.manual_seed(0)
    dictionary = dictionary_with_mask()
    model = build_encoder_model("normformer_roberta_base", dictionary, TINY_ENCODER + ["--scale-attn"])
    _perturb_1d_(model, 0.3)
    tokens = padded_tokens([9, 6, 3], 9, len(dictionary) - 1, seed=1)
    masked = tokens.ne(PAD) & (torch.arange(9) % 3 == 1)
    target = torch.where(masked, tokens, torch.full_like(tokens, PAD))
    with torch.no_grad():
        logits, extra = model(tokens, masked_tokens=masked, return_all_hiddens=True)  # (M, V)
        layers = model.encoder.sentence_encoder.layers
        expected = expected_values(layers, extra["inner_states"], tokens, logits, False)
        values = recorded(model, target, lambda: model(tokens, masked_tokens=masked))
    assert values.keys() == expected.keys()
    for key, value in expected.items():
        assert values[key] == pytest.approx(value, rel=1e-5), key


def test_micro_batches_pool_into_the_update_and_the_file_records_it(tmp_path):
    """Two micro-batches: the largest logit is the larger, RMS and |log Z| the means over all their tokens."""
    torch.manual_seed(0)
    model = normformer_lm(tiny_dictionary(), flags=TINY).eval()
    batches = [padded_tokens([5, 5], 5, 50, seed=2), padded_tokens([3], 3, 50, seed=3) * 2 % 50 + 4]
    recorder = DiagnosticsRecorder(2, tmp_path / "d.jsonl")
    singles = []
    with torch.no_grad():
        for tokens in batches:
            with recorder.watch(4, model, tokens, PAD) as batch:
                model(tokens)
            singles.append({key: value for key, value in batch.values.items()})

        class Optimizer:
            get_lr = staticmethod(lambda: 1e-3)

        recorder.step(Optimizer, 4)
    [record] = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert record["update"] == 4 and record["lr"] == 1e-3
    for i in range(2):
        key = f"layers.{i}"
        assert record["attn_logit"][key] == pytest.approx(max(s[f"attn_logit/{key}"].item() for s in singles))
        squares, count = (sum(float(s[f"layer_rms/{key}"][j]) for s in singles) for j in (0, 1))
        assert record["layer_rms"][key] == pytest.approx(math.sqrt(squares / count), rel=1e-6)
    sums, counts = (sum(float(s["abs_log_z"][j]) for s in singles) for j in (0, 1))
    assert counts == 13 and record["abs_log_z"] == pytest.approx(sums / counts, rel=1e-6)


def test_lambert_is_refused_by_name():
    from fairseq_normformer.modules.lambert_layer import LambertLayer, LambertLayerConfig

    model = torch.nn.ModuleDict({"layers": torch.nn.ModuleList([LambertLayer(LambertLayerConfig(DIM, 48, HEADS))])})
    with pytest.raises(ValueError, match="lambert's two-phase attention is not measured"):
        check_diagnosable(model)
