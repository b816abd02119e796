"""The batched scorer against a plain forward pass of the model, one sequence at a time, with an
explicit log_softmax and gather; tokenization against SentencePiece and the fairseq dictionary."""
import pytest
import sentencepiece as spm
import torch

from fairseq_normformer.zeroshot.scorer import load_scorer
from fairseq_normformer.zeroshot.tasks import load_task


@torch.no_grad()
def reference_logprobs(model, tokens):
    """log p(tokens[t] | tokens[:t]) for t >= 1, from one unpadded forward pass."""
    x = torch.tensor([tokens])
    logits = model(x[:, :-1])[0].float()  # (1, T, V)
    lprobs = torch.log_softmax(logits, dim=-1)[0]
    return lprobs.gather(-1, x[0, 1:, None])[:, 0], lprobs.argmax(-1).eq(x[0, 1:])


def reference_score(scorer, context_tokens, continuation_tokens):
    """(sum of log-probabilities, all greedy) of the continuation after </s> + context, keeping the
    last max_positions + 1 tokens."""
    tokens = ([scorer.dictionary.eos()] + context_tokens + continuation_tokens)[-(scorer.max_positions + 1) :]
    lprobs, greedy = reference_logprobs(scorer.model, tokens)
    n = len(continuation_tokens)
    return lprobs[-n:].sum().item(), bool(greedy[-n:].all())


def sample_pairs(task_files):
    """Real (context, continuation) pairs of every task, plus the edge cases."""
    examples = [example for name, path in task_files.items() for example in load_task(name, path)[:2]]
    pairs = [pair for example in examples for pair in example.pairs]
    long_context = " ".join(context for context, _ in pairs)  # far beyond the model's 96 positions
    return pairs + [("", pairs[0][1].strip()), (long_context, pairs[1][1]), (pairs[2][0] + "  ", pairs[2][1].strip())]


@pytest.mark.slow
def test_batched_scores_match_one_by_one_forward(scorer, task_files, tiny_lm_corpus):
    sp = spm.SentencePieceProcessor(model_file=str(tiny_lm_corpus.spm_model))
    encode = lambda text: [scorer.dictionary.index(p) for p in sp.encode(text, out_type=str)]  # noqa: E731
    pairs = sample_pairs(task_files)
    scores = scorer.score(pairs)
    assert len({s.num_tokens for s in scores}) > 3, "the batches should mix lengths (padding)"
    for (context, continuation), score in zip(pairs, scores):
        # at a word boundary, context and continuation tokenize independently
        context_tokens = encode(context.rstrip()) if context.strip() else []
        continuation_tokens = encode(continuation if not context.endswith(" ") else " " + continuation)
        assert score.num_tokens == len(continuation_tokens)
        expected, greedy = reference_score(scorer, context_tokens, continuation_tokens)
        assert score.logprob == pytest.approx(expected, abs=1e-4)
        assert score.is_greedy == greedy


def test_greedy_flag_of_the_models_own_continuation(scorer):
    """A continuation built from argmax predictions is greedy; changing one token makes it not."""
    context = scorer.encode("Return the number of")
    tokens = [scorer.dictionary.eos()] + context
    with torch.no_grad():
        for _ in range(4):  # </s> included: it is a token like the others here
            tokens.append(int(scorer.model(torch.tensor([tokens]))[0][0, -1].argmax()))
    continuation = tokens[len(context) + 1 :]
    changed = continuation[:2] + [(continuation[2] + 1) % len(scorer.dictionary)] + continuation[3:]
    greedy, not_greedy = scorer.score_tokens([(context, continuation), (context, changed)])
    assert greedy.is_greedy and not not_greedy.is_greedy


def test_subword_continuation_is_split_from_the_whole_text(scorer):
    """A continuation that starts inside a word is tokenized as in running text, and its score is
    log p(whole) - log p(context) (the chain rule) when the context's tokens are a prefix."""
    context, continuation = "Return the attribute", "s of the object."
    context_tokens, continuation_tokens = scorer.encode_pair(context, continuation)
    whole = scorer.encode(context + continuation)
    assert context_tokens + continuation_tokens == whole
    (score,) = scorer.score([(context, continuation)])
    lprobs, _ = reference_logprobs(scorer.model, [scorer.dictionary.eos()] + whole)
    assert score.logprob == pytest.approx(lprobs[len(context_tokens) :].sum().item(), abs=1e-4)


def test_rolling_logprob_predicts_each_token_once(scorer, tiny_lm_corpus):
    """Each token is predicted once, in chunks of max_positions; a chunk ending at token e sees the
    max_positions inputs before e (so the last, partial chunk gets a full window of context)."""
    text = " ".join((tiny_lm_corpus.raw_dir / "test.txt").read_text().splitlines()[:8])
    tokens = [scorer.dictionary.eos()] + scorer.encode(text)  # tokens[i] for i >= 1 is predicted once
    window = scorer.max_positions
    assert len(tokens) > 2 * window + 1 and (len(tokens) - 1) % window, "want full and partial chunks"
    expected = 0.0
    for first in range(1, len(tokens), window):
        last = min(first + window, len(tokens)) - 1
        lprobs, _ = reference_logprobs(scorer.model, tokens[max(0, last - window) : last + 1])
        expected += lprobs[-(last - first + 1) :].sum().item()
    assert scorer.rolling_logprob(text) == pytest.approx(expected, abs=1e-3)


@torch.no_grad()
def reference_greedy(scorer, context, steps):
    tokens = [scorer.dictionary.eos()] + scorer.encode(context)
    start = len(tokens)
    for _ in range(steps):
        next_token = int(scorer.model(torch.tensor([tokens]))[0][0, -1].argmax())
        if next_token == scorer.dictionary.eos():
            break
        tokens.append(next_token)
    return scorer.sp.decode_pieces([scorer.dictionary[t] for t in tokens[1:]]), tokens[start:]


def test_incremental_greedy_generation_matches_full_forward_argmax(scorer, tiny_lm_corpus):
    lines = (tiny_lm_corpus.raw_dir / "train.txt").read_text().splitlines()[:20]
    contexts = [" ".join(line.split()[:4]) for line in lines]
    context, text = max(((c, reference_greedy(scorer, c, steps=12)[0]) for c in contexts), key=lambda x: len(x[1]))
    output = text[len(context) :]
    assert len(output) >= 2, "the tiny model should continue some context with a few characters"
    assert scorer.generate_greedy(context, max_new_tokens=12) == output
    stop = output[-2:]
    assert scorer.generate_greedy(context, until=["@@@", stop], max_new_tokens=12) == output.split(stop)[0]
    two_tokens = reference_greedy(scorer, context, steps=2)[0][len(context) :]
    assert scorer.generate_greedy(context, max_new_tokens=2) == two_tokens


def test_too_long_continuation_is_an_error(scorer):
    with pytest.raises(ValueError, match="does not fit the model's 96 positions"):
        scorer.score([("A", " word" * 200)])


def test_mismatched_sentencepiece_model_is_refused(tiny_checkpoint, tmp_path):
    text = tmp_path / "other.txt"
    text.write_text("".join(f"zq{i} xv{i * 7} kj{i % 13}\n" for i in range(400)))
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "other"), vocab_size=60,
                                   hard_vocab_limit=False, minloglevel=2)  # fmt: skip
    with pytest.raises(ValueError, match="does not match the checkpoint's dictionary"):
        load_scorer(tiny_checkpoint, tmp_path / "other.model")


def test_missing_dictionary_names_the_data_directory(tiny_checkpoint, tiny_lm_corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match="dict.txt"):
        load_scorer(tiny_checkpoint, tiny_lm_corpus.spm_model, data=tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_a_clear_error(tiny_checkpoint, tiny_lm_corpus):
    with pytest.raises(ValueError, match="no CUDA device; use device cpu"):
        load_scorer(tiny_checkpoint, tiny_lm_corpus.spm_model, device="cuda:0")
