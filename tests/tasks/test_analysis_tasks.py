"""The *_analysis tasks: fairseq's tasks plus the measurement options, and their option checks."""
import pytest
from fairseq import options, tasks
from fairseq.tasks.language_modeling import LanguageModelingTask
from fairseq.tasks.masked_lm import MaskedLMTask

from fairseq_normformer.instrumentation.task_mixin import AnalysisTaskMixin
from tests.conftest import USER_DIR, fairseq_config


def setup(data_bin, task, *flags):
    arch = "roberta_base" if task.startswith("masked_lm") else "normformer_lm"
    argv = [str(data_bin), "--user-dir", str(USER_DIR), "--task", task, "--arch", arch, *flags]
    cfg = fairseq_config(options.parse_args_and_arch(options.get_training_parser(), argv))
    return tasks.setup_task(cfg.task)


@pytest.mark.parametrize("name, base", [("language_modeling_analysis", LanguageModelingTask),
                                        ("masked_lm_analysis", MaskedLMTask)])  # fmt: skip
def test_registered_tasks_are_fairseqs_with_the_options_off_by_default(tiny_lm_corpus, name, base):
    task = setup(tiny_lm_corpus.data_bin, name)
    assert isinstance(task, base) and isinstance(task, AnalysisTaskMixin)
    assert task.grad_norm_recorder is None and task.overflow_threshold is None and task.data_order_file is None
    assert task.diagnostics is None


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--grad-norm-file", "g.jsonl"], "--grad-norm-file needs --grad-norm-interval"),
        (["--grad-norm-interval", "-1"], "--grad-norm-interval must be >= 0"),
        (["--diagnostics-file", "d.jsonl"], "--diagnostics-file needs --diagnostics-interval"),
        (["--diagnostics-interval", "-1"], "--diagnostics-interval must be >= 0"),
        (["--stop-on-activation-overflow"], "need --activation-overflow-threshold"),
        (["--activation-overflow-file", "o.jsonl"], "need --activation-overflow-threshold"),
        (["--activation-overflow-threshold", "-5"], "must be >= 0"),
    ],
)
def test_inconsistent_options_are_named(tiny_lm_corpus, flags, message):
    with pytest.raises(ValueError, match=message):
        setup(tiny_lm_corpus.data_bin, "language_modeling_analysis", *flags)
