"""fairseq 0.12 builds its config with hydra 1.0's API (``convert_namespace_to_omegaconf`` in
fairseq/dataclass/utils.py, run by every CLI), and hydra >= 1.1 answers with six deprecation
warnings about fairseq's code and fairseq's own config files, none about the user's."""
import warnings

# The start of each message (``warnings.filterwarnings`` matches from the start, ignoring case).
FAIRSEQ_HYDRA_WARNINGS = (
    r"hydra\.experimental\.initialize\(\) is no longer experimental",
    r"hydra\.experimental\.compose\(\) is no longer experimental",
    r"\s*The version_base parameter is not specified",
    r"In 'config': Usage of deprecated keyword in package header '# @package _group_'",
    r"\s*'config' is validated against ConfigStore schema with the same name",
    r"\s*The strict flag in the compose API is deprecated",
)


def silence_fairseq_hydra_warnings() -> None:
    for message in FAIRSEQ_HYDRA_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
