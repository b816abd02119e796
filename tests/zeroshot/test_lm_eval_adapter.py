"""lm-evaluation-harness on our checkpoint: lm_eval's own HellaSwag, WinoGrande, StoryCloze and
OpenBookQA task definitions (prompts, metrics), pointed at local files, through lm_eval's Python
API and the registered ``normformer`` model, must agree with our scorer and accuracies; rolling
log-likelihoods follow lm_eval's own window code."""
import csv
import json
from pathlib import Path

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")  # requirements/test.txt pins it
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402

from fairseq_normformer.zeroshot.evaluate import evaluate  # noqa: E402
from fairseq_normformer.zeroshot.lm_eval_adapter import NormFormerLM  # noqa: E402
from fairseq_normformer.zeroshot.tasks import load_task  # noqa: E402

LM_EVAL_TASKS = Path(lm_eval.__file__).parent / "tasks"
# our task -> (lm_eval's config, the metric that matches our normalization, ours)
HARNESS = {
    "hellaswag": ("hellaswag/hellaswag.yaml", {"acc": "none", "acc_norm": "char"}),
    "winogrande": ("winogrande/default.yaml", {"acc": "none"}),
    "storycloze": ("storycloze/storycloze_2016.yaml", {"acc": "none"}),
    "openbookqa": ("openbookqa/openbookqa.yaml", {"acc": "none", "acc_norm": "char"}),
}


def storycloze_jsonl(csv_path, out):
    """The HuggingFace layout of StoryCloze, which lm_eval's config reads."""
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    out.write_text("".join(json.dumps({
        **{f"input_sentence_{k}": row[f"InputSentence{k}"] for k in range(1, 5)},
        "sentence_quiz1": row["RandomFifthSentenceQuiz1"], "sentence_quiz2": row["RandomFifthSentenceQuiz2"],
        "answer_right_ending": int(row["AnswerRightEnding"])}) + "\n" for row in rows))  # fmt: skip
    return out


def local_task_yaml(directory, name, data_file):
    """lm_eval's own task config with the dataset replaced by a local JSON-lines file."""
    config, _ = HARNESS[name]
    (directory / f"{name}_local.yaml").write_text(
        f"include: {LM_EVAL_TASKS / config}\ntask: {name}_local\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    validation: {data_file}\n  cache_dir: {directory / 'hf'}\n"
        "training_split: null\ntest_split: null\n"
    )


@pytest.fixture(scope="module")
def harness_results(tiny_checkpoint, tiny_lm_corpus, task_files, tmp_path_factory):
    from lm_eval.tasks import TaskManager

    directory = tmp_path_factory.mktemp("lm_eval_tasks")
    files = dict(task_files, storycloze=storycloze_jsonl(task_files["storycloze"], directory / "sc.jsonl"))
    for name in HARNESS:
        local_task_yaml(directory, name, files[name])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        return lm_eval.simple_evaluate(
            model="normformer",  # the registered name, built from lm_eval's model_args string
            model_args=f"checkpoint={tiny_checkpoint},spm_model={tiny_lm_corpus.spm_model},max_tokens=192",
            tasks=[f"{name}_local" for name in HARNESS],
            task_manager=TaskManager(include_path=str(directory), include_defaults=False),
            log_samples=True,
            bootstrap_iters=0,
        )


@pytest.mark.parametrize("name", list(HARNESS))
def test_lm_eval_tasks_agree_with_our_prompts_scores_and_accuracy(harness_results, scorer, task_files, name):
    examples = load_task(name, task_files[name])
    samples = sorted(harness_results["samples"][f"{name}_local"], key=lambda s: s["doc_id"])
    assert len(samples) == len(examples)
    for sample, example in zip(samples, examples):
        requests = [tuple(arguments) for arguments in sample["arguments"]]
        if name == "winogrande":  # lm_eval: " " + the text after the blank, stripped
            assert requests == [(ctx, " " + cont.strip()) for ctx, cont in example.pairs]
        else:
            assert requests == example.pairs
        ours = scorer.score(example.pairs)
        theirs = [response[0] for response in sample["resps"]]
        assert [logprob for logprob, _ in theirs] == pytest.approx([s.logprob for s in ours], abs=1e-4)
        assert [greedy for _, greedy in theirs] == [s.is_greedy for s in ours]
    accuracy = evaluate(scorer, examples).accuracy
    for metric, normalization in HARNESS[name][1].items():
        assert 100 * harness_results["results"][f"{name}_local"][f"{metric},none"] == pytest.approx(
            accuracy[normalization]
        )


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint, tiny_lm_corpus):
    return NormFormerLM(checkpoint=str(tiny_checkpoint), spm_model=str(tiny_lm_corpus.spm_model))


def instance(request_type, arguments):
    return Instance(request_type=request_type, doc={}, arguments=arguments, idx=0)


@torch.no_grad()
def test_loglikelihood_rolling_uses_lm_evals_windows(adapter, tiny_lm_corpus):
    scorer = adapter.scorer
    texts = [" ".join((tiny_lm_corpus.raw_dir / "valid.txt").read_text().splitlines()[:n]) for n in (1, 9)]
    expected = []
    for text in texts:
        total = 0.0
        windows = get_rolling_token_windows(scorer.encode(text), scorer.dictionary.eos(), scorer.max_positions, 1)
        for context, target in map(make_disjoint_window, windows):
            tokens = torch.tensor([context + target])  # lm_eval's input: context + target[:-1]
            lprobs = torch.log_softmax(scorer.model(tokens[:, :-1])[0].float(), dim=-1)[0]
            total += lprobs[-len(target) :].gather(-1, torch.tensor(target)[:, None]).sum().item()
        expected.append(total)
    assert len(scorer.encode(texts[1])) > 2 * scorer.max_positions
    results = adapter.loglikelihood_rolling([instance("loglikelihood_rolling", (t,)) for t in texts])
    assert results == pytest.approx(expected, abs=1e-3)


def test_generate_until_is_greedy_and_stops(adapter):
    context = "Return the"
    full = adapter.scorer.generate_greedy(context, max_new_tokens=6)
    kwargs = {"until": ["@@@"], "max_gen_toks": 6, "do_sample": False}
    (out,) = adapter.generate_until([instance("generate_until", (context, kwargs))])
    assert out == full
    if len(full) >= 2:
        (cut,) = adapter.generate_until([instance("generate_until", (context, dict(kwargs, until=full[-2:])))])
        assert cut == full.split(full[-2:])[0]
    with pytest.raises(ValueError, match="decodes greedily"):
        adapter.generate_until([instance("generate_until", (context, dict(kwargs, do_sample=True)))])
