"""Incremental decoding of left-padded prompts (issue 10): every step's logits equal the full
forward pass on the same padded batch and each row decoded alone, without padding."""
import pytest
import torch

from .lm_builders import TINY, converted_fairseq_pair, randomized_normformer_lm, tiny_dictionary

FAIRSEQ_OPERATIONS = ["--scale-attn", "--scale-fc", "--scale-heads", "--scale-resids"]  # fairseq has no --scale-qkv
ALL = FAIRSEQ_OPERATIONS + ["--scale-qkv"]
CASES = {
    "sinusoidal": ALL,
    "learned": ALL + ["--decoder-learned-pos"],
    "after_wo": ALL + ["--head-scale-position", "after_wo"],
    "post_ln": ALL + ["--post-ln"],
    "norm_bench": ["--qk-norm", "--sandwich-norm", "--norm-type", "rmsnorm", "--post-ln", "--deepnorm"],
}
PAD = 1  # fairseq Dictionary's pad index; real tokens are drawn from [4, 50)
PROMPT_LENGTHS = [9, 4, 1, 6]
NEW_TOKENS = 4
TOL = 1e-5  # fp32


def padded_prompts(lengths=PROMPT_LENGTHS, left=True):
    generator = torch.Generator().manual_seed(5)
    width = max(lengths)
    prompts = torch.full((len(lengths), width), PAD)
    for row, length in enumerate(lengths):
        columns = slice(width - length, width) if left else slice(0, length)
        prompts[row, columns] = torch.randint(4, 50, (length,), generator=generator)
    return prompts


def decode(model, tokens, new_tokens, state, start=0):
    """Feed ``tokens[:, start:]`` one column per call (fairseq passes the whole prefix each time),
    then ``new_tokens`` greedy tokens. Returns all tokens (B, T) and each call's logits (B, T - start, V)."""
    logits = []
    for t in range(start, tokens.size(1) + new_tokens):
        if t == tokens.size(1):
            tokens = torch.cat([tokens, logits[-1].argmax(-1, keepdim=True)], dim=1)
        logits.append(model.decoder(tokens[:, : t + 1], incremental_state=state)[0][:, -1])
    return tokens, torch.stack(logits, dim=1)


def max_diff_at_real_tokens(steps, reference, tokens):
    return (steps - reference).abs()[tokens.ne(PAD)].max().item()


@pytest.mark.parametrize("case", CASES)
def test_left_padded_steps_equal_the_full_forward(case):
    model = randomized_normformer_lm(CASES[case])
    with torch.no_grad():
        tokens, steps = decode(model, padded_prompts(), NEW_TOKENS, state={})
        diff = max_diff_at_real_tokens(steps, model(tokens)[0], tokens)
    assert diff <= TOL, f"{case}: max |Δlogit| = {diff}"


@pytest.mark.parametrize("case", CASES)
def test_left_padded_steps_equal_each_row_decoded_alone(case):
    model = randomized_normformer_lm(CASES[case])
    with torch.no_grad():
        tokens, steps = decode(model, padded_prompts(), NEW_TOKENS, state={})
        for row in range(tokens.size(0)):
            real = tokens[row].ne(PAD)
            _, alone = decode(model, tokens[row, real][None], 0, state={})
            diff = (steps[row, real] - alone[0]).abs().max().item()
            assert diff <= TOL, f"{case}, row {row}: max |Δlogit| = {diff}"


@pytest.mark.parametrize("case", ["sinusoidal", "learned"])
def test_beam_reorder_of_left_padded_rows(case):
    """Beam search reorders the cache mid-decoding; rows with different padding trade places."""
    model = randomized_normformer_lm(CASES[case])
    new_order = torch.tensor([2, 0, 0, 3])
    with torch.no_grad():
        state = {}
        tokens, steps = decode(model, padded_prompts(), 2, state)
        model.decoder.reorder_incremental_state_scripting(state, new_order)
        tokens = torch.cat([tokens[new_order], steps[new_order, -1].argmax(-1, keepdim=True)], dim=1)
        start = tokens.size(1) - 1
        tokens, continued = decode(model, tokens, 3, state, start=start)
        diff = max_diff_at_real_tokens(continued, model(tokens)[0][:, start:], tokens[:, start:])
    assert diff <= TOL, f"{case}: max |Δlogit| after reordering = {diff}"


@pytest.mark.parametrize("positions", [[], ["--decoder-learned-pos"]])
def test_right_padded_steps_equal_fairseqs_own_decoder(positions):
    """Right padding (what fairseq-generate does) keeps fairseq's incremental positions at real tokens."""
    theirs, ours = converted_fairseq_pair(tiny_dictionary(), TINY + FAIRSEQ_OPERATIONS + positions)
    prompts = padded_prompts(left=False)
    with torch.no_grad():
        _, expected = decode(theirs, prompts, 0, state={})
        _, steps = decode(ours, prompts, 0, state={})
    assert max_diff_at_real_tokens(steps, expected, prompts) <= TOL
