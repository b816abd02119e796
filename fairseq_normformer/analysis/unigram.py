"""The unigram baseline of a masked LM: predict every masked token from the training split's piece
frequencies alone, ignoring the context. Its accuracy (always the most frequent training piece) and
perplexity (cross-entropy under the training frequencies, add-one smoothed) are what an MLM's
validation ``mlm_accuracy`` and ``mlm_ppl`` must beat to show that the model reads its context.
Masked positions are drawn from the ordinary pieces (no specials, no [MASK]), so those are counted."""
import math
from collections import Counter
from pathlib import Path

from fairseq.data import Dictionary, data_utils


def piece_counts(data_bin, split: str, dictionary: Dictionary) -> Counter:
    dataset = data_utils.load_indexed_dataset(str(Path(data_bin) / split), dictionary)
    if dataset is None:
        raise ValueError(f"{data_bin} has no {split!r} split")
    counts = Counter()
    for i in range(len(dataset)):
        counts.update(dataset[i].tolist())
    for special in range(dictionary.nspecial):
        counts.pop(special, None)
    return counts


def unigram_baseline(data_bin, split: str = "valid") -> dict:
    """{piece, accuracy (%), perplexity, tokens} of predicting ``split`` from the train split's frequencies."""
    dictionary = Dictionary.load(str(Path(data_bin) / "dict.txt"))
    train, held_out = piece_counts(data_bin, "train", dictionary), piece_counts(data_bin, split, dictionary)
    top, _ = train.most_common(1)[0]
    total, vocab = sum(train.values()), len(dictionary) - dictionary.nspecial
    n = sum(held_out.values())
    nll = -sum(c * math.log((train[piece] + 1) / (total + vocab)) for piece, c in held_out.items()) / n
    return {"piece": dictionary[top], "accuracy": 100.0 * held_out[top] / n, "perplexity": math.exp(nll), "tokens": n}
