"""normformer_bert's pre-training heads under the mlm_nsp options: --no-nsp builds no pooler or NSP
head, --sbo-loss-weight > 0 adds SpanBERT's span boundary head (checked against its formula, its
output embedding tied to the input embedding), and checkpoints move between the variants."""
import copy

import pytest
import torch
import torch.nn.functional as F

from .encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask

MLM_NSP = ("--task", "mlm_nsp", "--criterion", "mlm_nsp")


SPANBERT = ("--no-nsp", "--sbo-loss-weight", "1")


def bert(d, *options):
    torch.manual_seed(0)
    return build_encoder_model("normformer_bert_base", d, TINY_ENCODER + list(options), task=MLM_NSP).eval()


@pytest.fixture(scope="module")
def models():
    d = dictionary_with_mask()
    return d, {(): bert(d), SPANBERT: bert(d, *SPANBERT)}


def test_no_nsp_model_has_no_nsp_parameters_and_sbo_off_changes_nothing(models):
    d, built = models
    plain, no_nsp = built[()], built[SPANBERT]
    assert any(".pooler." in k for k in plain.state_dict()) and any(".nsp_head." in k for k in plain.state_dict())
    assert not any(".pooler." in k or ".nsp_head." in k for k in no_nsp.state_dict())
    tokens = torch.tensor([[d.bos(), 10, 11, 12, d.eos()]])
    logits, extra = no_nsp(tokens)
    assert "nsp_logits" not in extra and logits.shape == (1, 5, len(d))
    explicit_zero = bert(d, "--sbo-loss-weight", "0")  # the default: no SBO head, the same model
    assert set(explicit_zero.state_dict()) == set(plain.state_dict())
    for name, tensor in plain.state_dict().items():
        torch.testing.assert_close(explicit_zero.state_dict()[name], tensor, atol=0, rtol=0)


def test_span_boundary_head_follows_spanbert_formula(models):
    """y_i = LN(GeLU(W2 LN(GeLU(W1 [x_{s-1}; x_{e+1}; p_{i-s+1}])))) · E^T + b, token by token."""
    d, built = models
    model = built[SPANBERT]
    head = model.encoder.sbo_head
    assert head.weight is model.encoder.sentence_encoder.embed_tokens.weight  # tied, as the MLM head
    tokens = torch.tensor([[d.bos(), 10, 11, 12, 13, 14, 15, d.eos()], [d.bos(), 20, 21, 22, d.eos(), d.pad(), d.pad(), d.pad()]])
    masked = torch.zeros_like(tokens, dtype=torch.bool)
    masked[0, 2:5] = masked[1, 1] = True  # spans 2..4 and 1..1
    boundaries = torch.zeros(2, 8, 2, dtype=torch.long)
    boundaries[0, 2:5] = torch.tensor([1, 5])
    boundaries[1, 1] = torch.tensor([0, 2])
    with torch.no_grad():
        _, extra = model(tokens, masked_tokens=masked, span_boundaries=boundaries)
        x, _ = model(tokens, features_only=True)
    expected, dim = [], x.size(-1)
    for row, i, before, after in [(0, 2, 1, 5), (0, 3, 1, 5), (0, 4, 1, 5), (1, 1, 0, 2)]:
        h = torch.cat([x[row, before], x[row, after], head.positions.weight[i - before - 1]])
        h = F.layer_norm(F.gelu(h @ head.fc1.weight.T + head.fc1.bias), (dim,), head.norm1.weight, head.norm1.bias)
        h = F.layer_norm(F.gelu(h @ head.fc2.weight.T + head.fc2.bias), (dim,), head.norm2.weight, head.norm2.bias)
        expected.append(h @ model.encoder.sentence_encoder.embed_tokens.weight.T + head.bias)
    assert extra["sbo_logits"].shape == (4, len(d))
    torch.testing.assert_close(extra["sbo_logits"], torch.stack(expected), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pretrained_options", [SPANBERT, ()])
def test_checkpoints_load_across_pretraining_variants(models, pretrained_options):
    """Fine-tuning builds the model without the pre-training options: heads the checkpoint lacks keep
    their initialisation, heads the model lacks are dropped; the encoder's weights come over."""
    d, built = models
    pretrained = copy.deepcopy(built[pretrained_options])
    model = copy.deepcopy(built[() if pretrained_options else SPANBERT])
    with torch.no_grad():
        for p in pretrained.parameters():
            p.add_(0.5)  # tell the two apart
    model.load_state_dict(pretrained.state_dict())  # as --restore-file: upgrade_state_dict, strict load
    for name, tensor in pretrained.state_dict().items():
        if name in model.state_dict() and not any(h in name for h in ("pooler", "nsp_head", "sbo_head")):
            torch.testing.assert_close(model.state_dict()[name], tensor, atol=0, rtol=0, msg=name)
    if model.encoder.sbo_head is not None:  # still tied to the (loaded) embeddings
        assert model.encoder.sbo_head.weight is model.encoder.sentence_encoder.embed_tokens.weight
        torch.testing.assert_close(model.encoder.sbo_head.weight, pretrained.encoder.sentence_encoder.embed_tokens.weight)
