"""Oracle: our Post-LN BERT and RoBERTa, mapped into HuggingFace transformers by the shipped export
mapping, give the same MLM logits, NSP logits and BERT pre-training loss."""
import pytest
import torch
import transformers
from omegaconf import OmegaConf

from fairseq_normformer.cli.export_hf import to_hf_model
from fairseq_normformer.criterions.mlm_nsp import MlmNspCriterion, MlmNspCriterionConfig

from .encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask, fake_task

ATOL = 1e-4


def perturbed(model):
    """Random biases and LayerNorm weights too, so that a mis-mapped parameter cannot hide."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def pair_batch(dictionary, lengths, seed=0):
    """`<s> A </s> B </s>` rows, right-padded, with HuggingFace's token_type_ids and attention_mask
    written out from the segment lengths (independently of the model's own segment rule)."""
    g = torch.Generator().manual_seed(seed)
    rows, types = [], []
    for len_a, len_b in lengths:
        a = torch.randint(dictionary.nspecial, len(dictionary) - 1, (len_a,), generator=g)
        b = torch.randint(dictionary.nspecial, len(dictionary) - 1, (len_b,), generator=g)
        rows.append(torch.cat([torch.tensor([dictionary.bos()]), a, torch.tensor([dictionary.eos()]), b,
                               torch.tensor([dictionary.eos()])]))  # fmt: skip
        types.append(torch.tensor([0] * (len_a + 2) + [1] * (len_b + 1)))
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), dictionary.pad())
    token_types = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (r, t) in enumerate(zip(rows, types)):
        tokens[i, : len(r)], token_types[i, : len(t)] = r, t
    return tokens, token_types, tokens.ne(dictionary.pad()).long()


def test_postln_bert_matches_huggingface_bert_for_pretraining():
    d = dictionary_with_mask()
    model = perturbed(build_encoder_model("postln_bert_base", d))
    hf = to_hf_model(model, d)
    assert isinstance(hf, transformers.BertForPreTraining)
    tokens, token_types, attention_mask = pair_batch(d, [(5, 7), (9, 3), (2, 2)])

    mlm_logits, extra = model(tokens)
    hf_out = hf(input_ids=tokens, token_type_ids=token_types, attention_mask=attention_mask)
    real = attention_mask.bool()
    torch.testing.assert_close(mlm_logits[real], hf_out.prediction_logits[real], atol=ATOL, rtol=0)
    torch.testing.assert_close(extra["nsp_logits"], hf_out.seq_relationship_logits, atol=ATOL, rtol=0)

    # Total loss. With the same number of targets in every row, the mean over rows of per-row
    # MLM means (ours) equals the mean over all targets (HuggingFace's).
    targets = torch.full_like(tokens, d.pad())
    for i, row in enumerate(tokens):
        positions = torch.nonzero((row >= d.nspecial)).flatten()[[0, -1]]
        targets[i, positions] = row[positions]
    nsp_labels = torch.tensor([0, 1, 1])
    sample = {"net_input": {"src_tokens": tokens}, "target": targets, "nsp_target": nsp_labels,
              "ntokens": int(real.sum()), "nsentences": len(tokens)}  # fmt: skip
    criterion = MlmNspCriterion(OmegaConf.structured(MlmNspCriterionConfig), fake_task(d))
    loss, sample_size, _ = criterion(model, sample)
    hf_labels = targets.masked_fill(targets.eq(d.pad()), -100)
    hf_loss = hf(input_ids=tokens, token_type_ids=token_types, attention_mask=attention_mask,
                 labels=hf_labels, next_sentence_label=nsp_labels).loss  # fmt: skip
    torch.testing.assert_close(loss / sample_size, hf_loss, atol=ATOL, rtol=0)


def test_postln_roberta_matches_huggingface_roberta_for_masked_lm():
    d = dictionary_with_mask()
    model = perturbed(build_encoder_model("normformer_roberta", d))
    hf = to_hf_model(model, d)
    assert isinstance(hf, transformers.RobertaForMaskedLM)
    tokens, _, attention_mask = pair_batch(d, [(6, 4), (3, 1)])
    real = attention_mask.bool()
    ours, _ = model(tokens)
    theirs = hf(input_ids=tokens, attention_mask=attention_mask).logits
    torch.testing.assert_close(ours[real], theirs[real], atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "arch, flags, named",
    [
        ("normformer_bert_base", [], "--scale-attn"),
        ("preln_bert_base", [], "--encoder-normalize-before"),
        ("postln_bert_base", ["--scale-qkv"], "--scale-qkv"),
        ("preln_roberta_base", [], "--encoder-normalize-before"),
    ],
)
def test_export_refuses_what_huggingface_cannot_represent(arch, flags, named):
    d = dictionary_with_mask()
    with pytest.raises(ValueError, match=named):
        to_hf_model(build_encoder_model(arch, d, TINY_ENCODER + flags), d)
