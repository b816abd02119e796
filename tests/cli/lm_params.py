"""An independent count of a normformer_lm model's parameters, for the end-to-end tests."""


def expected_params(vocab, layers, d, ffn, heads, tied, normformer) -> int:
    """Pre-LN decoder with sinusoidal positions (no parameters): token embedding (plus an output
    projection when untied); per layer q, k, v, out projections with bias, two FFN linears with bias
    and two LayerNorms; a final LayerNorm. NormFormer adds per layer a LayerNorm after attention (2d),
    one after the FFN activation (2·ffn) and HeadScale's γ (one per head)."""
    embeddings = vocab * d * (1 if tied else 2)
    layer = 4 * (d * d + d) + (d * ffn + ffn) + (ffn * d + d) + 2 * (2 * d)
    extra = (2 * d + 2 * ffn + heads) if normformer else 0
    return embeddings + layers * (layer + extra) + 2 * d
