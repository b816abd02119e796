"""What a training step costs by formula: its FLOPs, and the activations NormFormer adds.

``shapes`` is the dict ``model_shapes`` returns: layers L, embed d, ffn f, vocab V, seq_len T, tokens.
"""


def model_shapes(model, seq_len: int, batch: int) -> dict:
    layer = model.decoder.layers[0]
    return {
        "layers": len(model.decoder.layers),
        "embed": layer.fc1.in_features,
        "ffn": layer.fc1.out_features,
        "vocab": len(model.decoder.dictionary),
        "seq_len": seq_len,
        "tokens": batch * seq_len,
    }


def matmul_weights(shapes: dict) -> int:
    """N, the weights a token is multiplied by: per layer q, k, v, output (4d²), FC1 and FC2 (2df),
    and the output projection onto the vocabulary (dV, tied to the embedding, which is a lookup)."""
    d, f = shapes["embed"], shapes["ffn"]
    return shapes["layers"] * (4 * d * d + 2 * d * f) + d * shapes["vocab"]


def model_flops_per_step(shapes: dict) -> int:
    """6·N·tokens + 12·L·d·T·tokens (Kaplan et al. 2020, Sec. 2.1): a multiply-add is 2 FLOPs, the
    backward pass does twice the forward's matrix multiplies; attention's QKᵀ and AV are 2·2·T·d per
    token and layer forward, counted over the whole T×T matrix (the causal mask is not subtracted)."""
    tokens = shapes["tokens"]
    return 6 * matmul_weights(shapes) * tokens + 12 * shapes["layers"] * shapes["embed"] * shapes["seq_len"] * tokens


def added_activation_bytes(shapes: dict, bytes_per_value: int) -> int:
    """Tensors NormFormer keeps for backward beyond Pre-LN, per layer: the Post-Attn LN's input (the
    attention output, which Pre-LN does not keep) and HeadScale's W^O with γ folded in (d × d). The FFN LN
    adds none: its activation→LN function (modules/activation_layer_norm.py) keeps only FC1's output,
    which Pre-LN's activation keeps too, and FC2 keeps the LN output in place of the activation output.
    LN statistics (two floats a row) are left out."""
    per_layer = (shapes["tokens"] * shapes["embed"] + shapes["embed"] ** 2) * bytes_per_value
    return shapes["layers"] * per_layer


def bert_attention_flops(layers: int, embed: int, batch: int, padded_len: int) -> int:
    """QKᵀ and AV of a BERT step, forward + backward (3× forward): 2·2·T²·d per sequence and layer,
    T the batch's padded length."""
    return 3 * layers * 4 * embed * batch * padded_len**2


def lambert_attention_flops(layers: int, embed: int, blocks: int, segment_length: int, batch: int,
                            max_segments: int) -> int:  # fmt: skip
    """The same for LaMBERT as implemented: phase 1, N blocks of M+1 queries over M tokens and the
    batch's S segment keys; phase 2, one [CLS] query over 1+S keys per pair (forward + backward)."""
    m, s = segment_length, max_segments
    return 3 * layers * 4 * embed * (blocks * (m + 1) * (m + s) + batch * (1 + s))
