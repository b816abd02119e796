"""``language_modeling_analysis`` and ``masked_lm_analysis``: fairseq's tasks with the measurement
options of instrumentation/task_mixin.py (Figs. 3 and 5, Table 3)."""
from dataclasses import dataclass

from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

from ..checks import FAIRSEQ_TASK_NEEDS
from ..instrumentation.task_mixin import AnalysisOptions, AnalysisTaskMixin


@dataclass
class LanguageModelingAnalysisConfig(AnalysisOptions, LanguageModelingConfig):
    pass


@register_task("language_modeling_analysis", dataclass=LanguageModelingAnalysisConfig)
class LanguageModelingAnalysisTask(AnalysisTaskMixin, LanguageModelingTask):
    """fairseq's ``language_modeling`` with the measurement options."""

    data_needs = FAIRSEQ_TASK_NEEDS["language_modeling"]


@dataclass
class MaskedLMAnalysisConfig(AnalysisOptions, MaskedLMConfig):
    pass


@register_task("masked_lm_analysis", dataclass=MaskedLMAnalysisConfig)
class MaskedLMAnalysisTask(AnalysisTaskMixin, MaskedLMTask):
    """fairseq's ``masked_lm`` with the measurement options."""

    data_needs = FAIRSEQ_TASK_NEEDS["masked_lm"]
