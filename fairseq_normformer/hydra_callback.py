"""fairseq-hydra-train loads ``common.user_dir`` only inside fairseq's train.main, after it has launched
the run: the plugin's launch-time fixes (the command-line checks, save-on-signal, one process per rank
on CPU) would miss it. Hydra instantiates the callbacks of ``hydra.callbacks`` when it starts, before
the job; naming this one there imports the plugin first (docs/hydra.md):

    hydra:
      callbacks:
        normformer:
          _target_: fairseq_normformer.hydra_callback.LoadPlugin

Before the launch it also refuses ``model._name=<an --arch preset>``, which would build other sizes, and
a save dir that cannot work (none for a run; one shared by every job of a multirun, where each job after
the first would resume the first's finished checkpoint and train nothing); a job stopped by bad input
ends in one line, as fairseq-train's. Each job of a multirun starts with no best validation loss of an
earlier job (fairseq keeps it on ``save_checkpoint.best``, for the whole process).
"""
import sys
from importlib import resources

from fairseq import checkpoint_utils
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

import fairseq_normformer  # noqa: F401  (registers the models, tasks and criterions; applies the fixes)

from . import checks
from .hydra_presets import CONFIG_DIR, dataclass_preset


def check_model_name(config) -> None:
    """fairseq's add_defaults fills every field of the model's dataclass before the preset function
    runs, so its safe_getattr keeps the dataclass's sizes: ``model._name=preln_lm_gpt3_small`` would
    silently train a 512-dim 6-layer model. The preset's own config file is the way."""
    model = config.get("model")
    name = model.get("_name") if OmegaConf.is_dict(model) else model
    if not dataclass_preset(name):
        return
    if (CONFIG_DIR / f"{name}.yaml").exists():
        instead = f"use its config instead: model={name} with --config-dir examples/hydra (docs/hydra.md)"
    else:
        instead = "write the architecture's values in the config's model section instead"
    raise checks.BadInput(f"model._name={name} is an --arch preset, which fairseq-hydra-train would fill with "
                          f"the model's defaults, not the preset's sizes; {instead}")  # fmt: skip


HYDRA_SWEEP_DIR = OmegaConf.to_container(OmegaConf.load(resources.files("hydra.conf.hydra.output") / "default.yaml"))["sweep"]["dir"]


def save_dir_override(config):
    """The command line's ``checkpoint.save_dir=...`` override, else None."""
    overrides = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    return next((o for o in overrides if o.key_or_group == "checkpoint.save_dir"), None)


def check_save_dir(config, multirun: bool) -> None:
    """A run needs a save dir where the config's follows hydra's run dir (which follows it); the jobs of a
    multirun need one each (the example config's: hydra.sweep.dir/<job number>)."""
    given = save_dir_override(config)
    if multirun and given is not None and not given.is_sweep_override():
        raise checks.BadInput(
            f"checkpoint.save_dir={given.value()} in a multirun: every job would save there, and each after the "
            f"first would resume the first's finished checkpoint_last.pt and train nothing; give "
            f"hydra.sweep.dir={given.value()} instead (job N saves into {given.value()}/N, docs/hydra.md)")
    if multirun and OmegaConf.to_container(config.hydra.sweep)["dir"] == HYDRA_SWEEP_DIR:
        raise checks.BadInput(f"a multirun (-m) needs hydra.sweep.dir=DIR: job N saves into DIR/N (hydra's default, "
                              f"{HYDRA_SWEEP_DIR}, is under the folder you run from; docs/hydra.md)")
    follows = OmegaConf.to_container(config.hydra.run)["dir"] == "${checkpoint.save_dir}"
    if not multirun and given is None and follows and OmegaConf.is_interpolation(config.checkpoint, "save_dir"):
        raise checks.BadInput("no save dir: give checkpoint.save_dir=DIR (the checkpoints and hydra's logs go there)")


class LoadPlugin(Callback):
    """Importing its module loads the plugin; before the launch, refuses a config that cannot work."""

    def on_run_start(self, config, **kwargs) -> None:
        self.check(config, multirun=False)

    def on_multirun_start(self, config, **kwargs) -> None:
        self.check(config, multirun=True)

    def on_job_start(self, config, **kwargs) -> None:
        vars(checkpoint_utils.save_checkpoint).pop("best", None)  # an earlier job's, in a multirun

    def on_job_end(self, config, job_return, **kwargs) -> None:
        """A job refused for bad input (the command-line checks, a data reader) ends in one line, as
        fairseq-train's does; hydra would print "Error executing job" and a traceback."""
        if job_return.status == JobStatus.FAILED and checks.report_bad_input(job_return._return_value):
            sys.exit(1)

    @staticmethod
    def check(config, multirun: bool) -> None:
        """A BadInput as one line (hydra would print it with a traceback): before the launch, nothing is written."""
        try:
            check_model_name(config)
            check_save_dir(config, multirun)
        except checks.BadInput as error:
            checks.print_error(str(error))
            sys.exit(2)
