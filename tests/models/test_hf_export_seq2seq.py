"""normformer_transformer through the shipped HuggingFace code (modeling_normformer_seq2seq.py), saved and loaded
back with AutoModelForSeq2SeqLM and trust_remote_code: logits against fairseq's on padded batches, greedy
generate() against fairseq's SequenceGenerator (beam 1), KV-cache decoding against the full forward pass;
the tokenizer of a model with two dictionaries against fairseq's Dictionary."""
import pytest
import sentencepiece as spm
import torch
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

from fairseq_normformer.cli.export_hf import save_tokenizer, write_vocab
from fairseq_normformer.hf.convert import to_normformer_hf_model
from fairseq_normformer.modules.operations import ENCODER_ATTENTION_OPERATIONS, OPERATIONS

from .lm_builders import randomize_
from .test_hf_export import ATOL, exported
from .translation_builders import PAD, TINY_MT, build_translation_model, language_dictionary, padded_batch

EVERY_SWITCH = [op.flag for op in OPERATIONS + ENCODER_ATTENTION_OPERATIONS]
FAMILIES = {  # arch, flags, one dictionary for both sides
    "postln_learned_untied": ("postln_transformer_iwslt_de_en", ["--encoder-learned-pos", "--decoder-learned-pos"],
                              False),
    "preln_shared_all_embeddings": ("preln_transformer_wmt_en_de", ["--share-all-embeddings"], True),
    "normformer_every_switch_tied": ("normformer_transformer_iwslt_de_en", EVERY_SWITCH + [
        "--share-decoder-input-output-embed", "--layernorm-embedding", "--decoder-learned-pos"], False),
    "postln_every_switch_after_wo": ("postln_transformer_wmt_en_de", EVERY_SWITCH + [
        "--head-scale-position", "after_wo", "--no-scale-embedding", "--activation-fn", "gelu"], False),
    "deepnorm_rmsnorm_sandwich_qk_norm_first_layer": ("postln_transformer_iwslt_de_en", [
        "--deepnorm", "--norm-type", "rmsnorm", "--sandwich-norm", "--qk-norm", "--scale-heads", "--scale-fc",
        "--normformer-layers", "first:1"], False),
    "mix_ln_ln_scaling_qk_norm": ("preln_transformer_iwslt_de_en", [
        "--post-ln-layers", "first:1", "--ln-scaling", "--qk-norm", "--decoder-layers", "3"], False),
    "rezero": ("preln_transformer_iwslt_de_en", ["--rezero"], False),
    "reordered_norm": ("preln_transformer_iwslt_de_en", ["--reordered-norm"], False),
}  # fmt: skip


def translation_model(family):
    arch, flags, joined = FAMILIES[family]
    src_dict = language_dictionary("de")
    tgt_dict = src_dict if joined else language_dictionary("en", 30)
    _, model = build_translation_model(arch, TINY_MT + flags, src_dict, tgt_dict)
    randomize_(model)
    return model.eval(), src_dict, tgt_dict


def right_padded(left_padded):
    """The same rows with their padding moved to the right (HF tokenizers pad right)."""
    rows = [row[row.ne(PAD)] for row in left_padded]
    out = torch.full_like(left_padded, PAD)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
@torch.no_grad()
def test_seq2seq_logits_equal_fairseq_on_padded_batches(family, tmp_path):
    model, src_dict, tgt_dict = translation_model(family)
    hf = exported(model, src_dict, tmp_path, AutoModelForSeq2SeqLM, tgt_dict)
    assert type(hf).__name__ == "NormFormerForSeq2SeqLM"
    src, src_lengths, prev = padded_batch([7, 3, 5], [6, 2, 4], vocab=len(tgt_dict))
    real = prev.ne(PAD)
    ours = model(src, src_lengths, prev)[0]
    for source in (src, right_padded(src)):  # fairseq's left padding and HF's right padding
        theirs = hf(input_ids=source, attention_mask=source.ne(PAD), decoder_input_ids=prev,
                    decoder_attention_mask=real).logits  # fmt: skip
        torch.testing.assert_close(theirs[real], ours[real], atol=ATOL, rtol=0)
    features = AutoModel.from_pretrained(tmp_path, trust_remote_code=True).eval()(input_ids=src, decoder_input_ids=prev)
    torch.testing.assert_close(features.last_hidden_state[real], model(src, src_lengths, prev, features_only=True)[0][real],
                               atol=ATOL, rtol=0)  # fmt: skip


def fairseq_greedy(model, tgt_dict, src, src_lengths, max_new_tokens):
    """fairseq-generate's SequenceGenerator with beam 1 (default --min-len 1): each row's tokens, ending in </s>."""
    generator = SequenceGenerator([model], tgt_dict, beam_size=1, max_len_a=0, max_len_b=max_new_tokens)
    hypos = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": src_lengths}})
    return [h[0]["tokens"].tolist() for h in hypos]


def until_eos(tokens, eos):
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


@torch.no_grad()
def test_generate_greedy_equals_fairseq_and_kv_cache_equals_full_forward(tmp_path):
    model, src_dict, tgt_dict = translation_model("normformer_every_switch_tied")
    hf = exported(model, src_dict, tmp_path, AutoModelForSeq2SeqLM, tgt_dict)
    src, src_lengths, _ = padded_batch([7, 3, 5, 6], [1, 1, 1, 1], vocab=len(src_dict), seed=5)
    src[:, -1] = src_dict.eos()  # a source sentence ends with </s>, as fairseq's translation data
    new = 8
    ours = fairseq_greedy(model, tgt_dict, src, src_lengths, new)
    source = right_padded(src)
    kwargs = dict(attention_mask=source.ne(PAD), max_new_tokens=new, do_sample=False)
    cached = hf.generate(source, use_cache=True, **kwargs)
    assert torch.equal(cached, hf.generate(source, use_cache=False, **kwargs))
    assert cached[:, 0].eq(tgt_dict.eos()).all()  # decoder_start_token_id: </s>, as fairseq
    for row, tokens in enumerate(ours):
        theirs = until_eos(cached[row, 1:].tolist(), tgt_dict.eos())
        assert theirs == tokens[: len(theirs)] and (len(theirs) == new or theirs[-1] == tgt_dict.eos()), (tokens, theirs)

    # one target token at a time through the self-attention and cached encoder-attention keys == full forward
    decoder_mask = cached.ne(PAD) | torch.arange(cached.size(1)).eq(0)
    full = hf(input_ids=source, decoder_input_ids=cached, decoder_attention_mask=decoder_mask).logits
    encoder_outputs = hf.get_encoder()(source)
    out = hf(encoder_outputs=encoder_outputs, attention_mask=source.ne(PAD), decoder_input_ids=cached[:, :3],
             decoder_attention_mask=decoder_mask[:, :3], use_cache=True)  # fmt: skip
    steps, cache = [out.logits], out.past_key_values
    for t in range(3, cached.size(1)):
        out = hf(encoder_outputs=encoder_outputs, attention_mask=source.ne(PAD), decoder_input_ids=cached[:, t : t + 1],
                 decoder_attention_mask=decoder_mask[:, : t + 1], past_key_values=cache, use_cache=True)  # fmt: skip
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1)[decoder_mask], full[decoder_mask], atol=ATOL, rtol=0)


def test_seq2seq_export_refuses_adaptive_softmax_and_names_what_it_exports():
    src_dict, tgt_dict = language_dictionary("de"), language_dictionary("en", 30)
    _, model = build_translation_model("normformer_transformer", TINY_MT + ["--adaptive-softmax-cutoff", "10,20"],
                                       src_dict, tgt_dict)  # fmt: skip
    with pytest.raises(ValueError, match="does not implement: --adaptive-softmax-cutoff"):
        to_normformer_hf_model(model, src_dict, tgt_dict)
    with pytest.raises(ValueError, match="covers normformer_lm, normformer_roberta, normformer_bert and normformer_transformer"):
        to_normformer_hf_model(torch.nn.Linear(2, 2), src_dict)


def test_tokenizer_of_two_dictionaries_encodes_sources_and_targets_and_decodes_targets(tiny_lm_corpus, tmp_path):
    """Not joined (fairseq-preprocess without --joined-dictionary): the same pieces have other ids on each side."""
    sp = spm.SentencePieceProcessor(model_file=str(tiny_lm_corpus.spm_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    src_dict, tgt_dict = Dictionary(), Dictionary()
    for piece in pieces:
        src_dict.add_symbol(piece)
    for piece in reversed(pieces):
        tgt_dict.add_symbol(piece)
    write_vocab(tmp_path / "vocab.txt", src_dict)
    write_vocab(tmp_path / "target_vocab.txt", tgt_dict)
    save_tokenizer(tmp_path, tiny_lm_corpus.spm_model, "seq2seq")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)

    text = "Return the number of items in the list."
    line = " ".join(sp.encode(text, out_type=str))
    batch = tokenizer(text, text_target=text)
    assert batch["input_ids"] == src_dict.encode_line(line, add_if_not_exist=False).tolist()  # pieces + </s>
    target = tgt_dict.encode_line(line, add_if_not_exist=False)
    assert batch["labels"] == target.tolist() and batch["input_ids"] != batch["labels"]
    assert tokenizer.decode(target, skip_special_tokens=True) == tgt_dict.string(target, "sentencepiece")
