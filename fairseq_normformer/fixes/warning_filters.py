"""Warnings a clean run prints about fairseq's and its libraries' code, none about the user's: filtered
narrowly, each by the start of its message (``warnings.filterwarnings`` matches from the start, ignoring
case), its category and, where the warning names one, the module it is raised for.

fairseq 0.12 builds its config with hydra 1.0's API (``convert_namespace_to_omegaconf`` in
fairseq/dataclass/utils.py, run by every CLI), and hydra >= 1.1 answers with six deprecation
warnings about fairseq's code and fairseq's own config files. Standard library only: fixes/startup.py
loads this file by path at interpreter start, before fairseq-hydra-train's first warning."""
import warnings

FAIRSEQ_HYDRA_WARNINGS = (
    r"hydra\.experimental\.initialize\(\) is no longer experimental",
    r"hydra\.experimental\.compose\(\) is no longer experimental",
    r"\s*The version_base parameter is not specified",
    r"In 'config': Usage of deprecated keyword in package header '# @package _group_'",
    r"\s*'[^']*' is validated against ConfigStore schema with the same name",  # fairseq stores its schema under the config's name
    r"\s*The strict flag in the compose API is deprecated",
)

# (message, category, module): what torch and fairscale say, at every update or start, about fairseq's and
# fairscale's own calls
LIBRARY_WARNINGS = (
    # fairseq's data iterators ask for pinned memory, which a machine without an accelerator ignores
    (r"'pin_memory' argument is set as true but no accelerator is found", UserWarning,
     r"torch\.utils\.data\.dataloader"),
    # fairseq's train_step enters torch.cuda.amp.autocast(enabled=False) at every update (--amp: enabled)
    (r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", FutureWarning, r"fairseq\.tasks\.fairseq_task"),
    # fairscale's FSDP frees and allocates its flat parameters through Tensor.storage()
    (r"TypedStorage is deprecated", UserWarning, r"fairscale\.nn\.data_parallel\.fully_sharded_data_parallel"),
)


def silence_fairseq_hydra_warnings() -> None:
    for message in FAIRSEQ_HYDRA_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)


def silence_library_warnings() -> None:
    for message, category, module in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
