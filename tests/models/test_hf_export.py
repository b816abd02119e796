"""The shipped HuggingFace modeling code (fairseq_normformer/hf/), saved and loaded back through
transformers' Auto classes with trust_remote_code, against the fairseq models it was exported from:
logits on padded batches, greedy generation against fairseq's SequenceGenerator, KV-cache decoding
against the full forward pass."""
import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

from fairseq_normformer.cli.export_hf import check_exportable, is_native
from fairseq_normformer.hf.convert import copy_modeling_code, to_normformer_hf_model

from .encoder_builders import TINY_ENCODER, build_encoder_model, dictionary_with_mask
from .lm_builders import TINY, normformer_lm, randomized_normformer_lm, tiny_dictionary
from .test_bert_objectives import MLM_NSP, SPANBERT
from .test_hf_oracle import pair_batch, perturbed

ATOL = 1e-5
ALL_OPERATIONS = ["--scale-qkv", "--scale-heads", "--scale-attn", "--scale-fc", "--scale-resids"]


def exported(model, dictionary, out_dir, auto_class, target_dictionary=None):
    """Export ``model`` into ``out_dir`` and load it back with ``auto_class`` (trust_remote_code)."""
    to_normformer_hf_model(model, dictionary, target_dictionary).save_pretrained(out_dir)
    copy_modeling_code(out_dir)
    return auto_class.from_pretrained(out_dir, trust_remote_code=True).eval()


def padded_lm_batch(dictionary, lengths, left=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), max(lengths)), dictionary.pad())
    for row, n in enumerate(lengths):
        words = torch.randint(dictionary.nspecial, len(dictionary), (n,), generator=g)
        words[0] = dictionary.eos()  # an LM's text starts after </s>
        if left:
            tokens[row, -n:] = words
        else:
            tokens[row, :n] = words
    return tokens


LM_FAMILIES = {
    "preln_sinusoidal": [],
    "postln_learned": ["--post-ln", "--decoder-learned-pos"],
    "normformer_all_operations": ALL_OPERATIONS,
    "normformer_after_wo_learned_tied_scaled": ["--scale-heads", "--head-scale-position", "after_wo", "--scale-attn",
                                                "--decoder-learned-pos", "--share-decoder-input-output-embed",
                                                "--layernorm-embedding", "--activation-fn", "gelu"],  # fmt: skip
    # the normalization bench (docs/model.md, "Normalization schemes")
    "sandwich_qk_norm_rmsnorm": ["--sandwich-norm", "--qk-norm", "--norm-type", "rmsnorm", "--layernorm-embedding"],
    "dyt_ffn_ln_nobias_last_layer": ["--norm-type", "dyt", "--scale-attn", "--scale-fc", "--scale-heads",
                                     "--ffn-norm-type", "layernorm_nobias", "--normformer-layers", "last:1"],
    "deepnorm_ffn_rmsnorm": ["--post-ln", "--deepnorm", "--scale-fc", "--ffn-norm-type", "rmsnorm"],
    "mix_ln_ln_scaling_qk_norm": ["--post-ln-layers", "first:1", "--ln-scaling", "--qk-norm"],
    "rezero": ["--rezero"],
    "dyt_alpha_per_position": ["--norm-type", "dyt", "--dyt-alpha", "0.8,0.2,0.2", "--scale-fc"],
    "reordered_norm_rmsnorm": ["--reordered-norm", "--norm-type", "rmsnorm", "--qk-norm"],
}


@pytest.mark.parametrize("family", list(LM_FAMILIES))
@torch.no_grad()
def test_causal_lm_logits_equal_fairseq_on_padded_batches(family, tmp_path):
    d = tiny_dictionary()
    model = randomized_normformer_lm(LM_FAMILIES[family])
    hf = exported(model, d, tmp_path, AutoModelForCausalLM)
    assert type(hf).__name__ == "NormFormerForCausalLM"
    for left in (False, True):  # right padding (scoring) and left padding (batched prompts)
        tokens = padded_lm_batch(d, [12, 7, 3], left=left)
        real = tokens.ne(d.pad())
        ours = model(tokens)[0]
        theirs = hf(tokens, attention_mask=real.long()).logits
        torch.testing.assert_close(theirs[real], ours[real], atol=ATOL, rtol=0)


ENCODER_FAMILIES = {
    "normformer_bert": ("normformer_bert_base", []),
    "postln_bert_with_ffn_ln": ("postln_bert_base", ["--scale-fc"]),
    "normformer_roberta_all_operations": ("normformer_roberta_base", ALL_OPERATIONS),
    "preln_roberta_untied": ("preln_roberta_base", ["--untie-weights-roberta"]),
    "roberta_sandwich_qk_norm_rmsnorm": ("preln_roberta_base", ["--sandwich-norm", "--qk-norm", "--norm-type", "rmsnorm"]),
    "bert_deepnorm_dyt_first_layer": ("postln_bert_base", ["--deepnorm", "--norm-type", "dyt", "--qk-norm", "--scale-fc",
                                                           "--scale-heads", "--normformer-layers", "0"]),
    "roberta_mix_ln_ln_scaling_qk_norm": ("preln_roberta_base", ["--post-ln-layers", "0", "--ln-scaling", "--qk-norm"]),
    "bert_rezero_normformer": ("normformer_bert_base", ["--rezero"]),
    "roberta_reordered_norm": ("preln_roberta_base", ["--reordered-norm"]),
}


@torch.no_grad()
def test_spanbert_style_bert_exports_through_the_shipped_code_without_its_pretraining_heads(tmp_path):
    """A Post-LN BERT pre-trained with --no-nsp and the SBO head has no pooler, so transformers'
    BertForPreTraining cannot hold it: the shipped code does, leaving out the SBO head."""
    d = dictionary_with_mask()
    model = perturbed(build_encoder_model("postln_bert_base", d, TINY_ENCODER + list(SPANBERT), task=MLM_NSP))
    assert model.encoder.sbo_head is not None and not is_native(model)
    with pytest.raises(ValueError, match="--no-nsp"):
        check_exportable(model)
    hf = exported(model, d, tmp_path, AutoModelForMaskedLM)
    assert not any("sbo" in name for name in hf.state_dict())
    tokens, token_types, attention_mask = pair_batch(d, [(5, 7), (9, 3)])
    real = attention_mask.bool()
    theirs = hf(tokens, attention_mask=attention_mask, token_type_ids=token_types).logits
    torch.testing.assert_close(theirs[real], model(tokens)[0][real], atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", list(ENCODER_FAMILIES))
@torch.no_grad()
def test_encoder_logits_and_features_equal_fairseq_on_padded_batches(family, tmp_path):
    arch, flags = ENCODER_FAMILIES[family]
    d = dictionary_with_mask()
    model = perturbed(build_encoder_model(arch, d, TINY_ENCODER + flags))
    hf = exported(model, d, tmp_path, AutoModelForMaskedLM)
    tokens, token_types, attention_mask = pair_batch(d, [(5, 7), (9, 3), (2, 2)])
    real = attention_mask.bool()
    ours, _ = model(tokens)
    theirs = hf(tokens, attention_mask=attention_mask, token_type_ids=token_types if "bert" in arch else None).logits
    torch.testing.assert_close(theirs[real], ours[real], atol=ATOL, rtol=0)

    features, _ = model(tokens, features_only=True)
    hidden = AutoModel.from_pretrained(tmp_path, trust_remote_code=True).eval()(tokens).last_hidden_state
    torch.testing.assert_close(hidden[real], features[real], atol=ATOL, rtol=0)


def fairseq_greedy(model, dictionary, prompt, max_new_tokens):
    """fairseq's SequenceGenerator with beam 1, called as the language_modeling task's inference_step
    calls it for fairseq-interactive: starts from </s>, the prompt forced as prefix tokens."""
    generator = SequenceGenerator([model], dictionary, beam_size=1, max_len_b=len(prompt) + max_new_tokens)
    src = torch.tensor([[dictionary.eos()] + prompt])
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}}
    hypo = generator.generate([model], sample, prefix_tokens=src[:, 1:], bos_token=dictionary.eos())[0][0]
    return hypo["tokens"][len(prompt) :].tolist()


def hf_new_tokens(generated, prompt_len, eos):
    new = generated[prompt_len:].tolist()
    return new[: new.index(eos) + 1] if eos in new else new


@torch.no_grad()
def test_generate_greedy_equals_fairseq_sequence_generator_and_kv_cache_equals_full_forward(tmp_path):
    d = tiny_dictionary()
    torch.manual_seed(1)
    model = normformer_lm(d, flags=TINY + ALL_OPERATIONS + ["--decoder-learned-pos"]).eval()
    hf = exported(model, d, tmp_path, AutoModelForCausalLM)
    prompts = [[7, 8, 9, 10, 11], [20, 21], [30, 31, 32, 33]]
    new = 6
    batch = padded_lm_batch(d, [len(p) + 1 for p in prompts], left=True)
    for row, prompt in enumerate(prompts):
        batch[row, -len(prompt) :] = torch.tensor(prompt)
    mask = batch.ne(d.pad()).long()
    cached = hf.generate(batch, attention_mask=mask, max_new_tokens=new, do_sample=False, use_cache=True)
    uncached = hf.generate(batch, attention_mask=mask, max_new_tokens=new, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
    for row, prompt in enumerate(prompts):
        ours = fairseq_greedy(model, d, prompt, new)
        theirs = hf_new_tokens(cached[row], batch.size(1), d.eos())
        assert theirs == ours[: len(theirs)] and (len(theirs) == new or theirs[-1] == d.eos()), (ours, theirs)

    # one token at a time through the KV cache == the full forward pass, position by position
    full = hf(cached, attention_mask=cached.ne(d.pad()).long()).logits
    out = hf(cached[:, :4], attention_mask=cached[:, :4].ne(d.pad()).long(), use_cache=True)
    steps, cache = [out.logits], out.past_key_values
    for t in range(4, cached.size(1)):
        out = hf(cached[:, t : t + 1], attention_mask=cached[:, : t + 1].ne(d.pad()).long(), past_key_values=cache,
                 use_cache=True)  # fmt: skip
        steps.append(out.logits)
    real = cached.ne(d.pad())
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--adaptive-input", "--adaptive-input-cutoff", "20,40"], "--adaptive-input"),
        (["--adaptive-softmax-cutoff", "20,40"], "--adaptive-softmax-cutoff"),
    ],
)
def test_export_refuses_adaptive_input_and_softmax_by_flag(flags, named):
    d = tiny_dictionary()
    with pytest.raises(ValueError, match=named):
        to_normformer_hf_model(normformer_lm(d, flags=TINY + flags), d)


def stored_transposed(weight):
    return not weight.is_contiguous() and weight.t().is_contiguous()


def next_token_loss(logits, tokens):
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def test_linear_weights_stored_transposed_take_optimizer_steps_as_fairseq_and_save_unchanged(tmp_path):
    """eval() stores each linear weight of the shipped code transposed in memory (fast greedy
    generation): the same SGD step on it and on the fairseq model gives the same logits and greedy
    tokens, and saving and loading the stepped model gives it back exactly."""
    d = tiny_dictionary()
    model = randomized_normformer_lm(ALL_OPERATIONS + ["--decoder-learned-pos"])
    hf = exported(model, d, tmp_path / "exported", AutoModelForCausalLM)
    linears = {name: m.weight for name, m in hf.named_modules() if isinstance(m, torch.nn.Linear)}
    assert linears["lm_head"] is not hf.model.embed_tokens.weight  # untied: fairseq's default
    assert not [name for name, weight in linears.items() if not stored_transposed(weight)]
    tokens = padded_lm_batch(d, [10, 10, 10])
    for trained, loss in ((hf, hf.train()(tokens, labels=tokens).loss),
                          (model, next_token_loss(model.train()(tokens)[0], tokens))):  # fmt: skip
        loss.backward()
        torch.optim.SGD(trained.parameters(), lr=0.5).step()
    hf.eval(), model.eval()

    with torch.no_grad():
        ours, theirs = model(tokens)[0], hf(tokens).logits
        torch.testing.assert_close(theirs, ours, atol=ATOL, rtol=0)
        prompt = [7, 8, 9, 10, 11]
        generated = hf.generate(torch.tensor([[d.eos()] + prompt]), max_new_tokens=6, do_sample=False)
        new = hf_new_tokens(generated[0], len(prompt) + 1, d.eos())
        assert new == fairseq_greedy(model, d, prompt, 6)[: len(new)]
        hf.save_pretrained(tmp_path / "stepped")
        copy_modeling_code(tmp_path / "stepped")
        reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "stepped", trust_remote_code=True).eval()
        assert torch.equal(reloaded(tokens).logits, theirs)
