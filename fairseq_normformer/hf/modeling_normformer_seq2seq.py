"""NormFormer, Pre-LN and Post-LN encoder-decoders for HuggingFace transformers, as exported by
fairseq-normformer from ``normformer_transformer`` (fairseq's ``translation`` task).

Standalone (torch + transformers only): shipped in every export directory next to modeling_normformer.py,
whose embeddings and layers both sides reuse. The encoder is a non-causal NormFormerModel; the decoder's
layers add fairseq's encoder-attention sublayer between self-attention and the FFN. Generation starts
from ``decoder_start_token_id`` = ``</s>``, as fairseq's translation decoder does.
"""
from typing import Optional

import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPast, Seq2SeqLMOutput, Seq2SeqModelOutput

from .configuration_normformer import NormFormerConfig
from .modeling_normformer import NormFormerAttention, NormFormerLayer, NormFormerModel, NormFormerPreTrainedModel
from .modeling_normformer import layer_norm, output_norms, sublayer_norm


class NormFormerEncoderAttention(NormFormerAttention):
    """The decoder's attention to the encoder output: keys and values computed once per source and kept in
    the cross-attention cache. No QKV LN; HeadScale here is ``scale_enc_heads`` (our extension)."""

    def __init__(self, config: NormFormerConfig, layer_idx: int):
        super().__init__(config, layer_idx, scale_qkv=False, scale_heads=config.scale_enc_heads, qk_norm=False)

    def forward(self, x: Tensor, encoder_states: Tensor, encoder_mask: Tensor, cache: Optional[EncoderDecoderCache]):
        q = self._heads(self.q_proj(x))
        if cache is not None and cache.is_updated.get(self.layer_idx):
            cached = cache.cross_attention_cache.layers[self.layer_idx]
            return self._attend(q, cached.keys, cached.values, encoder_mask)
        k, v = self._heads(self.k_proj(encoder_states)), self._heads(self.v_proj(encoder_states))
        if cache is not None:
            k, v = cache.cross_attention_cache.update(k, v, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return self._attend(q, k, v, encoder_mask)


class NormFormerCrossAttentionLayer(NormFormerLayer):
    """NormFormerLayer with encoder attention between self-attention and the FFN, on the same Pre-/Post-LN
    path; ``scale_enc_attn`` adds a LayerNorm on its output, as Post-Attn LN (our extension)."""

    def __init__(self, config: NormFormerConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        d = config.hidden_size
        self.encoder_attn = NormFormerEncoderAttention(config, layer_idx)
        self.encoder_attn_layer_norm = sublayer_norm(config, d)
        self.enc_attn_ln = layer_norm(config, d) if config.scale_enc_attn or output_norms(config) else nn.Identity()

    def forward(self, x, mask, cache: Optional[EncoderDecoderCache], encoder_states, encoder_mask):
        x = self._self_attention_block(x, mask, cache.self_attention_cache if cache is not None else None)

        def encoder_attention(h):
            return self.enc_attn_ln(self.encoder_attn(h, encoder_states, encoder_mask, cache))

        x = self._sublayer(x, self.encoder_attn_layer_norm, encoder_attention)
        return self._feed_forward_block(x)


class NormFormerDecoder(NormFormerModel):
    """The causal NormFormerModel whose layers also attend to the encoder output."""

    layer_class = NormFormerCrossAttentionLayer

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask, attention_mask=None,
                past_key_values=None, **kwargs):  # fmt: skip
        """encoder_attention_mask (B, S), 1 at source tokens; attention_mask (B, past + T) as NormFormerModel's."""
        x, mask = self._embed_with_mask(input_ids, attention_mask, None, past_key_values)
        encoder_mask = encoder_attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        for layer in self.layers:
            x = layer(x, mask, past_key_values, encoder_hidden_states, encoder_mask)
        return BaseModelOutputWithPast(last_hidden_state=self._final_norm(x), past_key_values=past_key_values)


class NormFormerSeq2SeqModel(NormFormerPreTrainedModel):
    """Encoder and decoder: the decoder's hidden states (B, T, C) and the encoder's (B, S, C)."""

    def __init__(self, config: NormFormerConfig):
        super().__init__(config)
        self.encoder = NormFormerModel(config.encoder_config())
        self.decoder = NormFormerDecoder(config)
        if config.share_encoder_decoder_embeddings:  # fairseq's --share-all-embeddings
            self._tied_weights_keys = {"encoder.embed_tokens.weight": "decoder.embed_tokens.weight"}
        self.post_init()

    def get_encoder(self):
        return self.encoder

    def get_input_embeddings(self):
        return self.encoder.embed_tokens

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values=None, use_cache=None, **kwargs):  # fmt: skip
        """input_ids: source (B, S), padded either side; without an attention_mask padding is where it is pad.
        decoder_input_ids: ``</s>`` then the target so far (B, T)."""
        if attention_mask is None:
            attention_mask = input_ids.ne(self.config.pad_token_id).long()
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask)
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(), DynamicCache())
        decoded = self.decoder(decoder_input_ids, encoder_outputs[0], attention_mask, decoder_attention_mask,
                               past_key_values)  # fmt: skip
        return Seq2SeqModelOutput(
            last_hidden_state=decoded.last_hidden_state,
            past_key_values=past_key_values if use_cache else None,
            encoder_last_hidden_state=encoder_outputs[0],
        )


class NormFormerForSeq2SeqLM(NormFormerPreTrainedModel, GenerationMixin):
    def __init__(self, config: NormFormerConfig):
        super().__init__(config)
        self.model = NormFormerSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:  # fairseq's --share-decoder-input-output-embed
            self._tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}
        self.post_init()

    def get_encoder(self):
        return self.model.encoder

    def get_input_embeddings(self):
        return self.model.encoder.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values=None, use_cache=None, labels=None, **kwargs):  # fmt: skip
        """labels: the target (B, T) aligned with decoder_input_ids (-100 to ignore): position t predicts labels[t]."""
        if isinstance(encoder_outputs, tuple):
            encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs[0])
        out = self.model(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs,
                         past_key_values, use_cache)  # fmt: skip
        logits = self.lm_head(out.last_hidden_state)  # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, past_key_values=out.past_key_values,
                               encoder_last_hidden_state=out.encoder_last_hidden_state)  # fmt: skip
