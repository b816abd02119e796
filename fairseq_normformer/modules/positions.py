"""Token positions in incremental decoding that count each row's own tokens, as the full pass does.

fairseq's SinusoidalPositionalEmbedding and LearnedPositionalEmbedding, given an incremental state,
put the new token at ``padding_idx + prefix length`` in every row: a left-padded row's position is
off by its number of pads. Without one they use ``utils.make_positions`` (pads skipped). In
incremental mode TransformerDecoderBase passes the whole prefix and keeps only the last column,
so dropping the incremental state gives each row the position the full forward pass gives it.
"""
from torch import nn


def _positions_of_whole_prefix(module, args, kwargs):
    kwargs.pop("incremental_state", None)
    return args, kwargs


def count_positions_per_row(embed_positions: nn.Module) -> None:
    """Make ``embed_positions`` number each row's non-pad tokens in incremental decoding too.
    The cost is one embedding lookup over the prefix per step (attention reads as many keys)."""
    embed_positions.register_forward_pre_hook(_positions_of_whole_prefix, with_kwargs=True)
