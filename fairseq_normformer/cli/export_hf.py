"""normformer-export-hf: write a checkpoint as a HuggingFace transformers ``save_pretrained`` directory.

    normformer-export-hf CHECKPOINT OUT_DIR [--data DATA_BIN] [--spm-model SPM_MODEL] [--native]

Post-LN ``normformer_bert`` / ``normformer_roberta`` without NormFormer operations (learned positions,
unscaled embeddings, a LayerNorm on the embeddings) become transformers' own BertForPreTraining /
RobertaForMaskedLM; for BERT pass ``token_type_ids`` = 1 after the first ``</s>`` ([SEP]), as
``normformer_bert`` does itself. Every other ``normformer_lm`` / ``normformer_roberta`` /
``normformer_bert`` and every ``normformer_transformer`` (AutoModelForSeq2SeqLM) becomes the shipped
NormFormer modeling code (fairseq_normformer/hf/, copied into the directory and named by ``auto_map``;
load with ``trust_remote_code=True``); ``--native`` refuses instead. Token ids are the fairseq
dictionary's (``vocab.txt`` lists its symbols, one per id; a translation model's target dictionary,
when not joined, is ``target_vocab.txt``); with ``--spm-model`` the directory also holds a tokenizer
(AutoTokenizer). BERT's pooler and
NSP head are exported to the native classes only; classification heads are not exported.
"""
import argparse
import logging
import sys
from pathlib import Path

from fairseq import checkpoint_utils

from ..models.normformer_bert import NormFormerBertModel
from ..models.normformer_roberta import NormFormerRobertaModel
from ..models.normformer_transformer import NormFormerTransformerModel
from ..modules.operations import POST_LN, SWITCHES
from ..runs.atomic import atomic_directory

logger = logging.getLogger("normformer_export_hf")

HF_ACTIVATIONS = {"gelu": "gelu", "gelu_accurate": "gelu_new", "relu": "relu", "tanh": "tanh"}
LAYERNORM_EPS = 1e-5  # fairseq's and torch's LayerNorm default


def native_problems(model) -> list:
    """Every setting of an encoder that transformers' BERT/RoBERTa cannot represent."""
    args = model.args
    problems = sorted(op.flag for op in SWITCHES if op is not POST_LN and getattr(args, op.field, False))
    if str(getattr(args, "norm_type", "layernorm")) != "layernorm":
        problems.append(f"--norm-type {args.norm_type}")
    if not args.post_ln:
        problems.append("Pre-LN layers (--encoder-normalize-before, i.e. no --post-ln)")
    if not args.layernorm_embedding:
        problems.append("no --layernorm-embedding")
    if not args.no_scale_embedding or not args.encoder_learned_pos or args.no_token_positional_embeddings:
        problems.append("scaled embeddings or non-learned positions")
    if args.activation_fn not in HF_ACTIVATIONS:
        problems.append(f"--activation-fn {args.activation_fn}")
    if isinstance(model, NormFormerBertModel) and model.encoder.pooler is None:
        problems.append("--no-nsp (transformers' BertForPreTraining has a [CLS] pooler and an NSP head)")
    if isinstance(model, NormFormerBertModel) and args.pooler_activation_fn != "tanh":
        problems.append(f"--pooler-activation-fn {args.pooler_activation_fn} (BERT's pooler is tanh)")
    if not isinstance(model, NormFormerBertModel) and args.activation_fn != "gelu":
        problems.append(f"--activation-fn {args.activation_fn} (RoBERTa's LM head is GELU)")
    return problems


def check_exportable(model):
    """Raise naming every setting transformers' BERT/RoBERTa cannot represent."""
    problems = native_problems(model)
    if problems:
        raise ValueError(
            "transformers' BERT and RoBERTa are Post-LN transformers without NormFormer operations; "
            f"this checkpoint has: {', '.join(problems)}"
        )


def layer_state_dict(model, hf_prefix: str) -> dict:
    """Encoder layers: fairseq/NormFormer names -> transformers' BertLayer/RobertaLayer names."""
    names = {
        "self_attn.q_proj": "attention.self.query",
        "self_attn.k_proj": "attention.self.key",
        "self_attn.v_proj": "attention.self.value",
        "self_attn.out_proj": "attention.output.dense",
        "self_attn_layer_norm": "attention.output.LayerNorm",
        "fc1": "intermediate.dense",
        "fc2": "output.dense",
        "final_layer_norm": "output.LayerNorm",
    }
    out = {}
    for i, layer in enumerate(model.encoder.sentence_encoder.layers):
        for ours, theirs in names.items():
            module = layer.get_submodule(ours)
            out[f"{hf_prefix}encoder.layer.{i}.{theirs}.weight"] = module.weight
            out[f"{hf_prefix}encoder.layer.{i}.{theirs}.bias"] = module.bias
    return out


def lm_head_state_dict(lm_head, hf_prefix: str, transform: str, layer_norm: str) -> dict:
    return {
        f"{hf_prefix}{transform}.weight": lm_head.dense.weight,
        f"{hf_prefix}{transform}.bias": lm_head.dense.bias,
        f"{hf_prefix}{layer_norm}.weight": lm_head.layer_norm.weight,
        f"{hf_prefix}{layer_norm}.bias": lm_head.layer_norm.bias,
        f"{hf_prefix}decoder.weight": lm_head.weight,
        f"{hf_prefix}decoder.bias": lm_head.bias,
        f"{hf_prefix}bias": lm_head.bias,
    }


def bert_state_dict(model: NormFormerBertModel) -> dict:
    """normformer_bert -> transformers.BertForPreTraining parameter names."""
    enc = model.encoder.sentence_encoder
    first_position = enc.padding_idx + 1  # fairseq's learned positions start after the padding index
    state = {
        "bert.embeddings.word_embeddings.weight": enc.embed_tokens.weight,
        "bert.embeddings.position_embeddings.weight": enc.embed_positions.weight[first_position:],
        "bert.embeddings.token_type_embeddings.weight": enc.embed_segments.weight,
        "bert.embeddings.LayerNorm.weight": enc.layernorm_embedding.weight,
        "bert.embeddings.LayerNorm.bias": enc.layernorm_embedding.bias,
        "bert.pooler.dense.weight": model.encoder.pooler.dense.weight,
        "bert.pooler.dense.bias": model.encoder.pooler.dense.bias,
        "cls.seq_relationship.weight": model.encoder.nsp_head.weight,
        "cls.seq_relationship.bias": model.encoder.nsp_head.bias,
    }
    state.update(layer_state_dict(model, "bert."))
    lm_head = model.encoder.lm_head
    state.update(lm_head_state_dict(lm_head, "cls.predictions.", "transform.dense", "transform.LayerNorm"))
    return {k: v.detach().clone() for k, v in state.items()}


def roberta_state_dict(model: NormFormerRobertaModel) -> dict:
    """normformer_roberta -> transformers.RobertaForMaskedLM parameter names (same position offset)."""
    enc = model.encoder.sentence_encoder
    no_token_types = enc.embed_tokens.weight.new_zeros(1, enc.embed_tokens.embedding_dim)  # RoBERTa has one
    state = {
        "roberta.embeddings.word_embeddings.weight": enc.embed_tokens.weight,
        "roberta.embeddings.position_embeddings.weight": enc.embed_positions.weight,
        "roberta.embeddings.token_type_embeddings.weight": no_token_types,
        "roberta.embeddings.LayerNorm.weight": enc.layernorm_embedding.weight,
        "roberta.embeddings.LayerNorm.bias": enc.layernorm_embedding.bias,
    }
    state.update(layer_state_dict(model, "roberta."))
    state.update(lm_head_state_dict(model.encoder.lm_head, "lm_head.", "dense", "layer_norm"))
    return {k: v.detach().clone() for k, v in state.items()}


def import_transformers():
    try:
        import transformers
    except ImportError as e:
        raise ValueError("exporting needs HuggingFace transformers (pinned in requirements/test.txt)") from e
    return transformers


def hf_config(model, dictionary):
    """A transformers BertConfig or RobertaConfig with the model's shape and symbols."""
    transformers = import_transformers()
    args, enc = model.args, model.encoder.sentence_encoder
    is_bert = isinstance(model, NormFormerBertModel)
    n_positions = enc.embed_positions.weight.size(0) - (enc.padding_idx + 1 if is_bert else 0)
    config_class = transformers.BertConfig if is_bert else transformers.RobertaConfig
    return config_class(
        vocab_size=len(dictionary),
        hidden_size=args.encoder_embed_dim,
        num_hidden_layers=args.encoder_layers,
        num_attention_heads=args.encoder_attention_heads,
        intermediate_size=args.encoder_ffn_embed_dim,
        hidden_act=HF_ACTIVATIONS[args.activation_fn],
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.attention_dropout,
        max_position_embeddings=n_positions,
        type_vocab_size=2 if is_bert else 1,
        layer_norm_eps=LAYERNORM_EPS,
        pad_token_id=dictionary.pad(),
        bos_token_id=dictionary.bos(),
        eos_token_id=dictionary.eos(),
        tie_word_embeddings=not args.untie_weights_roberta,
    )


def to_hf_model(model, dictionary):
    """The transformers model equivalent to ``model`` (a Post-LN normformer_bert or normformer_roberta)."""
    transformers = import_transformers()
    if not isinstance(model, NormFormerRobertaModel):
        raise ValueError(f"cannot export {type(model).__name__} natively: only normformer_bert and normformer_roberta")
    check_exportable(model)
    if isinstance(model, NormFormerBertModel):
        hf_model, state = transformers.BertForPreTraining(hf_config(model, dictionary)), bert_state_dict(model)
    else:
        hf_model, state = transformers.RobertaForMaskedLM(hf_config(model, dictionary)), roberta_state_dict(model)
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"parameter mapping incomplete: missing {missing}, unexpected {unexpected}")
    return hf_model.eval()


def is_native(model) -> bool:
    """Whether transformers' own BERT/RoBERTa classes represent ``model`` exactly."""
    return isinstance(model, NormFormerRobertaModel) and not native_problems(model)


def export(checkpoint: Path, out_dir: Path, data: str = None, spm_model: Path = None, native: bool = False) -> Path:
    """Write ``out_dir`` (which must not exist or be empty) atomically."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} exists and is not empty; choose another directory")
    if spm_model is not None and not Path(spm_model).is_file():
        raise FileNotFoundError(f"--spm-model {spm_model}: no such file")
    overrides = {"data": data} if data else {}
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], arg_overrides=overrides)
    model, dictionary = models[0], task.source_dictionary
    seq2seq = isinstance(model, NormFormerTransformerModel)
    # a translation model's second dictionary, when not joined with the source's
    target = task.target_dictionary if seq2seq and task.target_dictionary.symbols != dictionary.symbols else None
    shipped = not (native or is_native(model))
    if shipped:
        import_transformers()
        from ..hf.convert import to_normformer_hf_model

        hf_model = to_normformer_hf_model(model, dictionary, task.target_dictionary if seq2seq else None)
    else:
        hf_model = to_hf_model(model, dictionary)
    with atomic_directory(out_dir) as tmp:
        hf_model.save_pretrained(tmp)
        write_vocab(tmp / "vocab.txt", dictionary)
        if target is not None:
            write_vocab(tmp / "target_vocab.txt", target)
        if shipped:
            from ..hf.convert import copy_modeling_code

            copy_modeling_code(tmp)
        if spm_model is not None:
            kind = "seq2seq" if seq2seq else "encoder" if isinstance(model, NormFormerRobertaModel) else "causal"
            save_tokenizer(tmp, spm_model, kind)
    return out_dir


def write_vocab(path: Path, dictionary) -> None:
    path.write_text("".join(s + "\n" for s in dictionary.symbols), encoding="utf-8")


# kind -> the tokenizer's special tokens: an LM's text starts after </s>; an encoder's is <s> A </s> (<mask>);
# a translation source is A </s>, as fairseq's translation data
TOKENIZER_SPECIALS = {
    "causal": dict(bos_token="</s>", append_eos=False),
    "encoder": dict(bos_token="<s>", append_eos=True, mask_token="<mask>"),
    "seq2seq": dict(bos_token="</s>", prepend_bos=False, append_eos=True),
}


def save_tokenizer(out_dir: Path, spm_model: Path, kind: str) -> None:
    """The SentencePiece model and vocab.txt (and target_vocab.txt) as a NormFormerTokenizer for AutoTokenizer."""
    from ..hf.tokenization_normformer import NormFormerTokenizer

    NormFormerTokenizer.register_for_auto_class("AutoTokenizer")
    target_vocab = out_dir / "target_vocab.txt"
    tokenizer = NormFormerTokenizer(
        spm_file=str(spm_model), vocab_file=str(out_dir / "vocab.txt"),
        target_vocab_file=str(target_vocab) if target_vocab.exists() else None, **TOKENIZER_SPECIALS[kind],
    )  # fmt: skip
    tokenizer.save_pretrained(out_dir)


def main(argv=None):
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path,
                        help="checkpoint (.pt) of normformer_lm, normformer_roberta, normformer_bert or normformer_transformer")  # fmt: skip
    parser.add_argument("out_dir", type=Path, help="directory to write (must not exist or be empty)")
    parser.add_argument("--data", help="the data directory holding dict.txt (translation: dict.{src,tgt}.txt), if it moved")
    parser.add_argument("--spm-model", type=Path, help="the SentencePiece model of the corpus: also export a tokenizer")
    parser.add_argument("--native", action="store_true",
                        help="only transformers' own BertForPreTraining/RobertaForMaskedLM; refuse what they cannot represent")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        out = export(args.checkpoint, args.out_dir, args.data, args.spm_model, args.native)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        sys.exit(f"normformer-export-hf: error: {e}")
    logger.info(f"wrote {out} (load it with transformers' from_pretrained, trust_remote_code=True)")


if __name__ == "__main__":
    main()
