"""Accuracy under each normalization against the formulas written out here, on the checkpoint's
own log-probabilities (themselves checked in test_scorer.py)."""
import numpy as np
import pytest
import sentencepiece as spm

from fairseq_normformer.zeroshot.evaluate import argmax, evaluate, evaluate_tasks, load_files
from fairseq_normformer.zeroshot.tasks import load_task


def explicit_accuracies(scorer, examples, sp):
    """GPT-3 Sec. 2.4 and lm-eval's acc_norm, spelled out with numpy."""
    correct = {"none": [], "token": [], "char": [], "unconditional": []}
    for example in examples:
        conditional = np.array([s.logprob for s in scorer.score(example.pairs)])
        answer_context = np.array([s.logprob for s in scorer.score([("Answer:", c) for _, c in example.pairs])])
        # tokens of each continuation, as SentencePiece splits it (continuations start at a word)
        n_tokens = np.array([len(sp.encode(c)) for _, c in example.pairs])
        n_chars = np.array([len(c) - 1 for _, c in example.pairs])  # without the joining space
        scores = {
            "none": conditional,
            "token": conditional / n_tokens,
            "char": conditional / n_chars,
            "unconditional": conditional - answer_context,  # log P(c|ctx) / P(c|"Answer:")
        }
        for kind, values in scores.items():
            correct[kind].append(int(np.argmax(values)) == example.label)  # np.argmax: first maximum
    return {kind: 100 * np.mean(hits) for kind, hits in correct.items()}


@pytest.mark.parametrize("name", ["hellaswag", "piqa", "storycloze", "openbookqa"])
def test_normalizations_follow_their_formulas(scorer, task_files, tiny_lm_corpus, name):
    sp = spm.SentencePieceProcessor(model_file=str(tiny_lm_corpus.spm_model))
    examples = load_task(name, task_files[name])
    result = evaluate(scorer, examples)
    assert result.accuracy == pytest.approx(explicit_accuracies(scorer, examples, sp))
    assert result.chance == pytest.approx(100 / len(examples[0].pairs))


def test_winogrande_partial_scoring_compares_the_shared_continuation(scorer, task_files):
    examples = load_task("winogrande", task_files["winogrande"])
    result = evaluate(scorer, examples, normalizations=("none",))
    hits = [int(np.argmax([s.logprob for s in scorer.score(e.pairs)])) == e.label for e in examples]
    assert result.accuracy["none"] == pytest.approx(100 * np.mean(hits))


def test_each_task_uses_gpt3s_normalization_unless_overridden(scorer, task_files):
    tasks = load_files({name: (path, None) for name, path in task_files.items()}, limit=5)
    summaries = evaluate_tasks(scorer, tasks, normalization={"piqa": "char"})
    expected = {"hellaswag": "token", "piqa": "char", "winogrande": "none", "storycloze": "token",
                "openbookqa": "unconditional"}  # fmt: skip
    for name, summary in summaries.items():
        assert summary["examples"] == 5
        assert summary["normalization"] == expected[name]
        assert summary["accuracy"] == summary["accuracy_by_normalization"][expected[name]]
    with pytest.raises(ValueError, match="unknown normalization 'bits'"):
        evaluate_tasks(scorer, tasks, normalization={"piqa": "bits"})


def test_ties_go_to_the_first_choice():
    assert argmax([-1.0, -0.5, -0.5]) == 1
    assert argmax([0.0]) == 0
