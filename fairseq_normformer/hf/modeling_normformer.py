"""NormFormer (Shleifer, Weston, Ott 2021) and its Pre-LN / Post-LN baselines for HuggingFace
transformers, as exported by fairseq-normformer (``normformer-export-hf``).

Standalone (torch + transformers only): shipped in every export directory and loaded with
``trust_remote_code=True``. It computes what fairseq's ``normformer_lm``, ``normformer_roberta`` and
``normformer_bert`` compute, with fairseq's parameter names and fairseq's position numbering
(positions start at ``pad_token_id + 1`` and skip padding).
"""
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast, MaskedLMOutput

from .configuration_normformer import NormFormerConfig
from .norm_kinds import NORM_MODULES, build_norm


def _gelu_accurate(x: Tensor) -> Tensor:  # fairseq's gelu_accurate (the tanh approximation)
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


# fairseq.utils.get_activation_fn, by name
ACTIVATIONS = {
    "relu": F.relu,
    "relu_squared": lambda x: F.relu(x).pow(2),
    "gelu": lambda x: F.gelu(x.float()).type_as(x),
    "gelu_accurate": _gelu_accurate,
    "gelu_fast": _gelu_accurate,
    "tanh": torch.tanh,
    "linear": lambda x: x,
}


def make_positions(is_token: Tensor, padding_idx: int) -> Tensor:
    """fairseq's utils.make_positions: padding_idx + 1, + 2, ... over each row's tokens; padding_idx at pads."""
    is_token = is_token.long()
    return torch.cumsum(is_token, dim=1) * is_token + padding_idx


def sinusoidal_table(num_embeddings: int, dim: int, padding_idx: int) -> Tensor:
    """fairseq's SinusoidalPositionalEmbedding.get_embedding (tensor2tensor's layout: sin | cos)."""
    half_dim = dim // 2
    freq = torch.exp(torch.arange(half_dim, dtype=torch.float) * -(math.log(10000) / (half_dim - 1)))
    angles = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(num_embeddings, 1)], dim=1)
    table[padding_idx, :] = 0
    return table


def segment_ids(input_ids: Tensor, sep: int) -> Tensor:
    """BERT's sentence A/B from the tokens, as normformer_bert: 1 after the first [SEP] (``</s>``)."""
    is_sep = input_ids.eq(sep).long()
    return (is_sep.cumsum(dim=1) - is_sep).gt(0).long()


def attention_mask_4d(key_mask: Tensor, tgt_len: int, causal: bool) -> Optional[Tensor]:
    """(B, S) True at real keys -> (B, 1, T, S) True where the last T queries may attend, or None when
    they may attend to every key (no padding, and not causal or one query: each step of generation).
    A query whose keys are all padding attends to itself, as fairseq-normformer's attention (no NaN)."""
    if (tgt_len == 1 or not causal) and bool(key_mask.all()):
        return None
    src_len = key_mask.size(1)
    allowed = key_mask.bool()[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(tgt_len, src_len, dtype=torch.bool, device=key_mask.device).tril(src_len - tgt_len)
    return allowed | torch.eye(src_len, dtype=torch.bool, device=key_mask.device)[src_len - tgt_len :]


def store_transposed(weight: nn.Parameter):
    """Lay an (out, in) linear weight out in memory as its (in, out) transpose, as GPT-2's Conv1D stores
    it; its shape, name and values stay. Generating at batch 1 multiplies one vector by each weight per
    step, a product bound by reading the weight, which MKL does faster from this layout (a step ~0.85x
    the time: docs/benchmarks.md). Tied embedding weights stay row-major: an embedding looks up rows."""
    if weight.is_contiguous():
        weight.data = weight.data.t().contiguous().t()


def layer_norm(config: NormFormerConfig, dim: int, kind: Optional[str] = None) -> nn.Module:
    """A norm of ``kind`` (default: the config's norm_type), as norm_kinds.py's row builds it."""
    return build_norm(kind or config.norm_type, dim, config.layer_norm_eps)


def sublayer_norm(config: NormFormerConfig, dim: int) -> nn.Module:
    """Each sublayer's own norm: none (Identity) with ReZero and OLMo 2's reordered norm."""
    return layer_norm(config, dim, "none" if config.rezero or config.reordered_norm else None)


def stack_norm(config: NormFormerConfig, dim: int) -> nn.Module:
    """The LM head's norm: none (Identity) with ReZero."""
    return layer_norm(config, dim, "none" if config.rezero else None)


def output_norms(config: NormFormerConfig) -> bool:
    """A norm on each sublayer's output: the sandwich norm's and OLMo 2's reordered norm's."""
    return config.sandwich_norm or config.reordered_norm


class NormFormerAttention(nn.Module):
    def __init__(self, config: NormFormerConfig, layer_idx: int, scale_qkv: bool, scale_heads: bool, qk_norm: bool):
        super().__init__()
        d = config.hidden_size
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = config.num_attention_heads, d // config.num_attention_heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        # Table 5, "+3 More LN": LayerNorm on the projected queries, keys and values.
        self.q_ln, self.k_ln, self.v_ln = [layer_norm(config, d) if scale_qkv else nn.Identity() for _ in "qkv"]
        # QK-norm (Henry et al. 2020): a norm over each head's queries and keys (head_dim), shared by the heads.
        self.q_norm, self.k_norm = [layer_norm(config, self.head_dim) if qk_norm else nn.Identity() for _ in "qk"]
        # HeadScale, Eq. 3: MultiHead(Q, K, V) = Concat(γ_1 h_1, ..., γ_n h_n) W^O.
        self.head_scale = nn.Parameter(torch.ones(self.num_heads)) if scale_heads else None
        self.head_scale_position = config.head_scale_position

    def forward(self, x: Tensor, mask: Optional[Tensor], cache: Optional[Cache]) -> Tensor:
        q, k, v = (head_norm(self._heads(ln(proj(x)))) for proj, ln, head_norm in
                   ((self.q_proj, self.q_ln, self.q_norm), (self.k_proj, self.k_ln, self.k_norm),
                    (self.v_proj, self.v_ln, nn.Identity())))  # fmt: skip
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        return self._attend(q, k, v, mask)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        """q: (B, H, T, Dh), k and v: (B, H, S, Dh) -> (B, T, C), through HeadScale and W^O."""
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh)
        if self.head_scale is not None and self.head_scale_position == "paper":
            heads = heads * self.head_scale[:, None, None]  # γ_i on head i's output, before W^O
        out = self.out_proj(heads.transpose(1, 2).flatten(2))  # (B, T, C)
        if self.head_scale is None or self.head_scale_position == "paper":
            return out
        # "after_wo", fairseq's variant: γ_i on the i-th chunk of W^O's output
        return (out.unflatten(-1, (self.num_heads, self.head_dim)) * self.head_scale[:, None]).flatten(-2)

    def _heads(self, x: Tensor) -> Tensor:  # (B, T, C) -> (B, H, T, Dh)
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)


class NormFormerLayer(nn.Module):
    """Pre-LN: x + f(LN(x)); Post-LN: LN(x + f(x)); plus the NormFormer operations (Fig. 1)."""

    def __init__(self, config: NormFormerConfig, layer_idx: int):
        super().__init__()
        d, f = config.hidden_size, config.intermediate_size
        in_spec = config.normformer_layers is None or layer_idx in config.normformer_layers
        op = lambda name: in_spec and getattr(config, name)  # noqa: E731  (the paper's operations)
        post_ln = config.post_ln_layers is not None and layer_idx in config.post_ln_layers  # Mix-LN
        self.normalize_before = config.normalize_before and not post_ln
        self.ln_scale = (layer_idx + 1) ** -0.5 if config.ln_scaling else None  # LayerNorm Scaling: _pre_norm
        self.self_attn = NormFormerAttention(config, layer_idx, op("scale_qkv"), op("scale_heads"), config.qk_norm)
        self.self_attn_layer_norm = sublayer_norm(config, d)
        sandwich = output_norms(config)  # a norm on each sublayer's output; its attention half is Post-Attn LN
        self.attn_ln = layer_norm(config, d) if op("scale_attn") or sandwich else nn.Identity()  # Post-Attn LN
        self.fc1, self.fc2 = nn.Linear(d, f), nn.Linear(f, d)
        self.activation_fn = ACTIVATIONS[config.hidden_act]
        self.ffn_layernorm = layer_norm(config, f, config.ffn_norm_type) if op("scale_fc") else nn.Identity()  # FFN LN
        self.ffn_out_ln = layer_norm(config, d) if sandwich else nn.Identity()
        self.w_resid = nn.Parameter(torch.ones(d)) if op("scale_resids") else None  # ResScale λ_resid
        self.final_layer_norm = sublayer_norm(config, d)
        self.rezero_alpha = nn.Parameter(torch.zeros(1)) if config.rezero else None  # ReZero's α
        self.deepnorm_alpha = config.deepnorm_alpha  # DeepNorm: LN(α x + f(x))

    def forward(self, x: Tensor, mask: Optional[Tensor], cache: Optional[Cache]) -> Tensor:
        return self._feed_forward_block(self._self_attention_block(x, mask, cache))

    def _self_attention_block(self, x: Tensor, mask: Optional[Tensor], cache: Optional[Cache]) -> Tensor:
        return self._sublayer(x, self.self_attn_layer_norm, lambda h: self.attn_ln(self.self_attn(h, mask, cache)))

    def _feed_forward_block(self, x: Tensor) -> Tensor:
        return self._sublayer(x, self.final_layer_norm, self._feed_forward, self.w_resid)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.ffn_out_ln(self.fc2(self.ffn_layernorm(self.activation_fn(self.fc1(x)))))

    def _sublayer(self, x, norm, fn, residual_scale=None):
        residual = x if residual_scale is None else residual_scale * x
        if self.deepnorm_alpha is not None:
            residual = self.deepnorm_alpha * residual
        h = fn(self._pre_norm(norm, x) if self.normalize_before else x)
        x = residual + (h if self.rezero_alpha is None else self.rezero_alpha * h)  # ReZero: x + α f(x)
        return x if self.normalize_before else norm(x)

    def _pre_norm(self, norm, x):
        """LayerNorm Scaling (Sun et al. 2025): LN(x) / sqrt(ℓ), ℓ the 1-based layer index."""
        return norm(x) if self.ln_scale is None else norm(x) * self.ln_scale


class NormFormerPreTrainedModel(PreTrainedModel):
    config_class = NormFormerConfig
    base_model_prefix = "model"
    _no_split_modules = ["NormFormerLayer"]

    def train(self, mode: bool = True):
        """Also stores every linear weight transposed in memory (see ``store_transposed``): ``eval()``,
        which ``from_pretrained`` calls after loading, makes generation fast."""
        super().train(mode)
        embeddings = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        for module in self.modules():
            if type(module) is nn.Linear and id(module.weight) not in embeddings:  # not quantized subclasses
                store_transposed(module.weight)
        return self

    def _init_weights(self, module):
        """For models built from a config alone; exported weights replace all of this."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, NORM_MODULES):
            module.reset_parameters()


class NormFormerModel(NormFormerPreTrainedModel):
    """Embeddings, layers and the final LayerNorm: hidden states (B, T, C)."""

    layer_class = NormFormerLayer

    def __init__(self, config: NormFormerConfig):
        super().__init__(config)
        d, pad = config.hidden_size, config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, d, padding_idx=pad)
        self.embed_segments = nn.Embedding(config.type_vocab_size, d) if config.type_vocab_size else None
        learned = config.position_embedding_type == "learned"
        self.embed_positions = nn.Embedding(config.max_position_embeddings + pad + 1, d, padding_idx=pad) if learned else None
        self.layernorm_embedding = layer_norm(config, d) if config.layernorm_embedding else None
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.layer_norm = layer_norm(config, d) if config.final_layer_norm else None
        self._sinusoids = None  # the sinusoidal table, grown on demand as fairseq's (not a weight)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, past_key_values=None, **kwargs):
        """attention_mask (B, past + T), 1 at tokens; without one, padding is where input_ids is pad."""
        x, mask = self._embed_with_mask(input_ids, attention_mask, token_type_ids, past_key_values)
        for layer in self.layers:
            x = layer(x, mask, past_key_values)
        return BaseModelOutputWithPast(last_hidden_state=self._final_norm(x), past_key_values=past_key_values)

    def _embed_with_mask(self, input_ids, attention_mask, token_type_ids, past_key_values):
        """The embeddings (B, T, C) and the attention mask of the layers (B, 1, T, past + T)."""
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if attention_mask is None:
            attention_mask = F.pad(input_ids.ne(self.config.pad_token_id), (past, 0), value=True)
        key_mask = attention_mask.bool()
        x = self._embed(input_ids, token_type_ids, key_mask)
        return x, attention_mask_4d(key_mask, input_ids.size(1), self.config.causal)

    def _final_norm(self, x: Tensor) -> Tensor:
        return x if self.layer_norm is None else self.layer_norm(x)

    def _embed(self, input_ids: Tensor, token_type_ids: Optional[Tensor], key_mask: Tensor) -> Tensor:
        x = self.embed_tokens(input_ids)
        if self.embed_segments is not None:
            types = token_type_ids if token_type_ids is not None else segment_ids(input_ids, self.config.eos_token_id)
            x = x + self.embed_segments(types)
        x = self.config.embed_scale * x
        if self.config.position_embedding_type != "none":
            positions = make_positions(key_mask, self.config.pad_token_id)[:, -input_ids.size(1) :]
            x = x + self._position_embeddings(positions)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        if not self.config.causal:  # fairseq's encoder zeroes the embeddings of padding
            x = x * key_mask[:, -input_ids.size(1) :, None].to(x.dtype)
        return x

    def _position_embeddings(self, positions: Tensor) -> Tensor:
        if self.embed_positions is not None:
            return self.embed_positions(positions)
        needed, weight = int(positions.max()) + 1, self.embed_tokens.weight
        table = self._sinusoids
        if table is None or table.size(0) < needed or table.device != weight.device or table.dtype != weight.dtype:
            size = max(needed, self.config.max_position_embeddings + self.config.pad_token_id + 1)
            table = self._sinusoids = sinusoidal_table(size, self.config.hidden_size, self.config.pad_token_id).to(weight)
        return table[positions]


class NormFormerForCausalLM(NormFormerPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: NormFormerConfig):
        super().__init__(config)
        self.model = NormFormerModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None, labels=None,
                logits_to_keep=0, **kwargs):  # fmt: skip
        """logits_to_keep: the last positions to compute logits at (0: all); generate() asks for 1."""
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        hidden = self.model(input_ids, attention_mask, past_key_values=past_key_values).last_hidden_state
        logits = self.lm_head(hidden[:, -logits_to_keep:])  # (B, T or logits_to_keep, V)
        loss = None
        if labels is not None:  # labels are input_ids (-100 to ignore); position t predicts t + 1
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=past_key_values if use_cache else None)


class NormFormerLMHead(nn.Module):
    """fairseq's RobertaLMHead: dense, activation, LayerNorm, then the (tied) output projection."""

    def __init__(self, config: NormFormerConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation_fn = ACTIVATIONS[config.hidden_act]
        self.layer_norm = stack_norm(config, config.hidden_size)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.layer_norm(self.activation_fn(self.dense(x))))


class NormFormerForMaskedLM(NormFormerPreTrainedModel):
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embed_tokens.weight"}

    def __init__(self, config: NormFormerConfig):
        super().__init__(config)
        self.model = NormFormerModel(config)
        self.lm_head = NormFormerLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, value):
        self.lm_head.decoder = value

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        hidden = self.model(input_ids, attention_mask, token_type_ids).last_hidden_state
        logits = self.lm_head(hidden)  # (B, T, V)
        loss = None
        if labels is not None:  # -100 where nothing is predicted
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)
