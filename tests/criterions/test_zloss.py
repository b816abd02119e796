"""z-loss (--zloss) against coef · log²Z written out in plain torch, in the causal LM's criterion
(cross_entropy_zloss) and mlm_nsp; --zloss 0 is the criterion without it, loss and gradients."""
import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from omegaconf import OmegaConf

from fairseq_normformer.checks import BadInput
from fairseq_normformer.criterions.mlm_nsp import MlmNspCriterion, MlmNspCriterionConfig
from fairseq_normformer.criterions.zloss import CrossEntropyZLossCriterion, z_loss

from ..models.encoder_builders import build_encoder_model, dictionary_with_mask
from ..models.encoder_builders import fake_task as encoder_task
from ..models.lm_builders import TINY, fake_task, normformer_lm, tiny_dictionary
from .test_mlm_nsp import make_batch

COEF = 0.01


def log_z_squared(logits):  # log²Z, Z = Σ_v exp(logit_v)
    return torch.log(torch.exp(logits.double()).sum(-1)).pow(2)


def test_z_loss_is_coef_times_log_z_squared():
    logits = 4 * torch.randn(3, 5, 11)
    torch.testing.assert_close(z_loss(logits, COEF).double(), COEF * log_z_squared(logits))


def lm_sample(d, pad_from=6):
    tokens = torch.randint(4, len(d), (3, 9), generator=torch.Generator().manual_seed(0))
    target = torch.cat([tokens[:, 1:], tokens[:, :1]], dim=1)
    target[0, pad_from:] = d.pad()
    return {"net_input": {"src_tokens": tokens}, "target": target, "ntokens": int(target.ne(d.pad()).sum())}


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    d = tiny_dictionary()
    return d, normformer_lm(d, flags=TINY).eval()


def test_lm_criterion_adds_the_z_loss_of_the_target_tokens(lm):
    d, model = lm
    sample = lm_sample(d)
    loss, sample_size, logs = CrossEntropyZLossCriterion(fake_task(d), False, COEF)(model, sample)
    logits = model(**sample["net_input"])[0]
    real = sample["target"].ne(d.pad())
    expected = F.cross_entropy(logits[real], sample["target"][real], reduction="sum") + COEF * log_z_squared(
        logits[real]
    ).sum()
    torch.testing.assert_close(loss.double(), expected.double(), rtol=1e-5, atol=1e-5)
    assert sample_size == sample["ntokens"] and logs["zloss"] > 0


def loss_and_grads(criterion, model, sample):
    model.zero_grad()
    loss = criterion(model, sample)[0]
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_lm_zloss_0_is_fairseqs_cross_entropy(lm):
    d, model = lm
    sample = lm_sample(d)
    theirs = loss_and_grads(CrossEntropyCriterion(fake_task(d), False), model, sample)
    ours = loss_and_grads(CrossEntropyZLossCriterion(fake_task(d), False, 0.0), model, sample)
    assert torch.equal(ours[0], theirs[0]) and all(torch.equal(a, b) for a, b in zip(ours[1], theirs[1]))


def mlm_nsp(d, zloss=None):
    cfg = MlmNspCriterionConfig() if zloss is None else MlmNspCriterionConfig(zloss=zloss)
    return MlmNspCriterion(OmegaConf.structured(cfg), encoder_task(d))


def test_mlm_nsp_adds_each_sequences_mean_z_loss_and_zloss_0_is_without():
    d = dictionary_with_mask()
    torch.manual_seed(0)
    model = build_encoder_model("normformer_bert_base", d).eval()
    sample = make_batch(d)
    without = loss_and_grads(mlm_nsp(d), model, sample)
    zero = loss_and_grads(mlm_nsp(d, 0.0), model, sample)
    assert torch.equal(zero[0], without[0]) and all(torch.equal(a, b) for a, b in zip(zero[1], without[1]))
    masked = sample["target"].ne(d.pad())
    logits = model(**sample["net_input"])[0]  # (B, T, V)
    per_sequence = [COEF * log_z_squared(logits[i][masked[i]]).mean() for i in range(masked.size(0))]
    with_z = mlm_nsp(d, COEF)(model, sample)[0]
    torch.testing.assert_close(with_z.double(), without[0].double() + sum(per_sequence), rtol=1e-5, atol=1e-5)


def test_a_negative_coefficient_is_one_line():
    with pytest.raises(BadInput, match=r"^--zloss -0.1: the z-loss coefficient is >= 0"):
        CrossEntropyZLossCriterion(fake_task(tiny_dictionary()), False, -0.1)
