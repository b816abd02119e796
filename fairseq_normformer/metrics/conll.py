"""Entity-level precision, recall and F1 of tagged chunks with the semantics of conlleval (the
CoNLL-2000/2003 evaluation script): tags are O or PREFIX-TYPE with prefix B, I, E or S, so IOB1
(CoNLL-2003: B- only between two adjacent chunks of one type), BIO (IOB2) and IOBES all work; an
I- tag after O or after another type starts a chunk. A predicted chunk is correct when a gold chunk
has the same type, start and end."""


def split_tag(tag: str) -> tuple:
    if tag in ("O", "."):
        return tag, ""
    prefix, _, kind = tag.partition("-")
    return (prefix, kind) if kind else ("I", prefix)  # a bare type is inside a chunk, as conlleval


def end_of_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    """Does a chunk end between the previous tag and this one (conlleval's endOfChunk)?"""
    return (prev in ("E", "S") or (prev in ("B", "I") and tag in ("B", "S", "O"))
            or (prev not in ("O", ".") and prev_type != kind))  # fmt: skip


def start_of_chunk(prev: str, tag: str, prev_type: str, kind: str) -> bool:
    """Does a chunk start at this tag (conlleval's startOfChunk)?"""
    return (tag in ("B", "S") or (prev in ("E", "S", "O") and tag in ("E", "I"))
            or (tag not in ("O", ".") and prev_type != kind))  # fmt: skip


def chunks(tags: list) -> set:
    """{(type, first, last)} of one sentence's tags."""
    found, start, prev, prev_type = set(), None, "O", ""
    for i, t in enumerate(list(tags) + ["O"]):
        tag, kind = split_tag(t)
        if start is not None and end_of_chunk(prev, tag, prev_type, kind):
            found.add((prev_type, start, i - 1))
            start = None
        if start_of_chunk(prev, tag, prev_type, kind):
            start = i
        prev, prev_type = tag, kind
    return found


def entity_counts(gold: set, predicted: set) -> tuple:
    """(correct, predicted, gold) counts of one sentence's entities {(type, first, last)}."""
    return len(gold & predicted), len(predicted), len(gold)


def precision_recall_f1(correct: int, n_predicted: int, n_gold: int) -> tuple:
    """In percent; 0 where undefined (no chunk predicted or none in the gold data)."""
    precision = 100 * correct / n_predicted if n_predicted else 0.0
    recall = 100 * correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def evaluate(gold_sentences: list, predicted_sentences: list) -> dict:
    """Scores of tag sequences."""
    return evaluate_entities([chunks(g) for g in gold_sentences], [chunks(p) for p in predicted_sentences])


def evaluate_entities(gold_entities: list, predicted_entities: list) -> dict:
    """Scores of per-sentence entity sets {(type, first, last)}, which may nest (span classification)."""
    counts = [entity_counts(g, p) for g, p in zip(gold_entities, predicted_entities)]
    correct, n_predicted, n_gold = (sum(c[i] for c in counts) for i in range(3))
    precision, recall, f1 = precision_recall_f1(correct, n_predicted, n_gold)
    return {"precision": precision, "recall": recall, "f1": f1, "chunks": n_gold, "predicted": n_predicted}
