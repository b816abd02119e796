"""Zero-shot multiple-choice accuracy: score every choice, normalize, take the argmax.

GPT-3 (Brown et al. 2020, Sec. 2.4) compares per-token likelihoods for most tasks and, for
OpenBookQA (and ARC, RACE), divides by the completion's probability after a generic answer
context: P(completion | context) / P(completion | answer_context). Per-character normalization is
lm-eval's ``acc_norm``. All four are computed for every task so they can be compared.
"""
from dataclasses import dataclass
from typing import Dict, List, Sequence

from .scorer import ContinuationScore, LMScorer
from .tasks import TASKS, Example, load_task

NORMALIZATIONS = ("none", "token", "char", "unconditional")
ANSWER_CONTEXT = "Answer:"  # GPT-3's answer_context ("Answer: " or "A: "); its space starts the continuation


def normalized_score(kind: str, continuation: str, conditional: ContinuationScore, unconditional=None) -> float:
    """One choice's score under a normalization:
    none:           sum_t log p(c_t | ctx, c_<t)
    token:          the sum / number of continuation tokens
    char:           the sum / number of characters of the choice, without the space that joins
                    it to the context (lm-eval's acc_norm)
    unconditional:  the sum - sum_t log p(c_t | "Answer:", c_<t)   (GPT-3, log of the ratio)"""
    if kind == "none":
        return conditional.logprob
    if kind == "token":
        return conditional.logprob / conditional.num_tokens
    if kind == "char":
        return conditional.logprob / len(continuation.lstrip())
    if kind == "unconditional":
        return conditional.logprob - unconditional.logprob
    raise ValueError(f"unknown normalization {kind!r}; known: {', '.join(NORMALIZATIONS)}")


def argmax(values: Sequence[float]) -> int:
    """The first index of the largest value (a tie goes to the earlier choice)."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


@dataclass
class TaskResult:
    examples: int
    chance: float  # expected accuracy (%) of a uniform random guess
    accuracy: Dict[str, float]  # % correct under each normalization


def check_normalizations(kinds):
    for kind in kinds:
        if kind not in NORMALIZATIONS:
            raise ValueError(f"unknown normalization {kind!r}; known: {', '.join(NORMALIZATIONS)}")


def evaluate(scorer: LMScorer, examples: List[Example], normalizations=NORMALIZATIONS) -> TaskResult:
    check_normalizations(normalizations)
    pairs = [pair for example in examples for pair in example.pairs]
    conditional = scorer.score(pairs)
    unconditional = (
        scorer.score([(ANSWER_CONTEXT, continuation) for _, continuation in pairs])
        if "unconditional" in normalizations
        else [None] * len(pairs)
    )
    predictions = {kind: [] for kind in normalizations}
    start = 0
    for example in examples:
        choices = range(start, start + len(example.pairs))
        for kind in normalizations:
            scores = [normalized_score(kind, pairs[i][1], conditional[i], unconditional[i]) for i in choices]
            predictions[kind].append(argmax(scores))
        start += len(example.pairs)
    labels = [example.label for example in examples]
    accuracy = {kind: 100.0 * sum(p == y for p, y in zip(predicted, labels)) / len(examples)
                for kind, predicted in predictions.items()}  # fmt: skip
    chance = 100.0 * sum(1 / len(example.pairs) for example in examples) / len(examples)
    return TaskResult(len(examples), chance, accuracy)


def load_files(files: Dict[str, tuple], limit=None) -> Dict[str, List[Example]]:
    """{task: examples} for {task: (path, labels path or None)}, the first ``limit`` of each file."""
    return {name: load_task(name, path, labels_path)[:limit] for name, (path, labels_path) in files.items()}


def evaluate_tasks(scorer: LMScorer, tasks: Dict[str, List[Example]], normalization: Dict[str, str] = None) -> dict:
    """{task: summary}; ``normalization`` overrides GPT-3's choice for some tasks."""
    normalization = normalization or {}
    check_normalizations(normalization.values())
    summaries = {}
    for name, examples in tasks.items():
        kind = normalization.get(name, TASKS[name].normalization)
        result = evaluate(scorer, examples)
        summaries[name] = {
            "column": TASKS[name].column, "examples": result.examples, "chance": result.chance,
            "normalization": kind, "accuracy": result.accuracy[kind], "accuracy_by_normalization": result.accuracy,
        }  # fmt: skip
    return summaries
