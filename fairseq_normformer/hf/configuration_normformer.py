"""NormFormerConfig: the settings of a NormFormer / Pre-LN / Post-LN transformer exported from
fairseq-normformer. Standalone (torch + transformers only): shipped in every export directory."""
from transformers import PretrainedConfig

# name -> default; each is an attribute of the config
SETTINGS = dict(
    vocab_size=1000,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    hidden_act="gelu",  # fairseq's activation names (relu, gelu, gelu_accurate, relu_squared, ...)
    causal=True,  # causal LM (decoder) or masked LM (encoder)
    normalize_before=True,  # Pre-LN; False: Post-LN
    scale_qkv=False,  # Table 5 "+3 More LN": LayerNorm on q, k, v
    scale_heads=False,  # HeadScale, Eq. 3
    head_scale_position="paper",  # "paper": before W^O; "after_wo": fairseq's variant
    scale_attn=False,  # Post-Attn LN (Fig. 1)
    scale_fc=False,  # FFN LN (Fig. 1)
    scale_resids=False,  # ResScale λ_resid (§2)
    qk_norm=False,  # QK-norm (Henry et al. 2020): a norm over each head's queries and keys
    sandwich_norm=False,  # a norm on each sublayer's output before the residual add (CogView; Peri-LN)
    norm_type="layernorm",  # every norm's kind: "layernorm", "rmsnorm" or "dyt"
    ffn_norm_type=None,  # the FFN LN's kind ("layernorm", "layernorm_nobias", "rmsnorm"); None: norm_type
    normformer_layers=None,  # the layers with the paper's operations (scale_*), e.g. [0]; None: all
    deepnorm_alpha=None,  # DeepNorm's residual scale α (Post-LN: LN(α x + f(x))); None: 1
    post_ln_layers=None,  # Mix-LN: the layers that are Post-LN in a Pre-LN stack, e.g. [0]; None: none
    rezero=False,  # ReZero: no norms, each sublayer x + α f(x) (α per layer: rezero_alpha)
    reordered_norm=False,  # OLMo 2's order: x + N(f(x)), no norm on a sublayer's input
    ln_scaling=False,  # LayerNorm Scaling: each Pre-LN sublayer norm's output × 1/sqrt(1-based layer index)
    position_embedding_type="sinusoidal",  # "sinusoidal", "learned" or "none"
    max_position_embeddings=1024,
    embed_scale=1.0,  # fairseq multiplies token embeddings by sqrt(d) unless --no-scale-embedding
    layernorm_embedding=False,
    final_layer_norm=True,  # fairseq's Pre-LN models end with a LayerNorm
    type_vocab_size=0,  # 2 for BERT's sentence A/B embeddings
    layer_norm_eps=1e-5,
)

# An encoder-decoder (is_encoder_decoder=True, NormFormerForSeq2SeqLM): the settings above describe the
# decoder, and the encoder's own values of these are stored as encoder_<name> (encoder_vocab_size, ...).
ENCODER_SETTINGS = ("vocab_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                    "position_embedding_type", "max_position_embeddings", "final_layer_norm", "normformer_layers",
                    "deepnorm_alpha", "post_ln_layers")  # fmt: skip
SEQ2SEQ_SETTINGS = dict(
    scale_enc_heads=False,  # HeadScale on the encoder attention: our extension of Eq. 3, not in the paper
    scale_enc_attn=False,  # LayerNorm on the encoder-attention output: our extension of Fig. 1
    share_encoder_decoder_embeddings=False,  # fairseq's --share-all-embeddings
)


class NormFormerConfig(PretrainedConfig):
    model_type = "normformer"

    def __init__(self, pad_token_id=1, bos_token_id=2, eos_token_id=2, tie_word_embeddings=True, **kwargs):
        for name, default in SETTINGS.items():
            setattr(self, name, kwargs.pop(name, default))
        if kwargs.get("is_encoder_decoder"):
            for name, default in SEQ2SEQ_SETTINGS.items():
                setattr(self, name, kwargs.pop(name, default))
            for name in ENCODER_SETTINGS:
                setattr(self, f"encoder_{name}", kwargs.pop(f"encoder_{name}", getattr(self, name)))
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )

    def encoder_config(self) -> "NormFormerConfig":
        """An encoder-decoder's encoder: the shared settings with the encoder_* ones, not causal."""
        settings = {name: getattr(self, name) for name in SETTINGS}
        settings.update({name: getattr(self, f"encoder_{name}") for name in ENCODER_SETTINGS}, causal=False)
        special = dict(pad_token_id=self.pad_token_id, bos_token_id=self.bos_token_id, eos_token_id=self.eos_token_id)
        return NormFormerConfig(**special, **settings)
