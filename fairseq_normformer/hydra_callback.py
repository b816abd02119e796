"""fairseq-hydra-train loads ``common.user_dir`` only inside fairseq's train.main, after it has launched
the run: the plugin's launch-time fixes (the command-line checks, save-on-signal, one process per rank
on CPU) would miss it. Hydra instantiates the callbacks of ``hydra.callbacks`` when it starts, before
the job; naming this one there imports the plugin first (docs/hydra.md):

    hydra:
      callbacks:
        normformer:
          _target_: fairseq_normformer.hydra_callback.LoadPlugin

Before the launch it also refuses ``model._name=<an --arch preset>``, which would build other sizes, and
a job stopped by bad input ends in one line, as fairseq-train's.
"""
import sys

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


class LoadPlugin(Callback):
    """Importing its module loads the plugin; before the launch, refuses a config that cannot work."""

    def on_run_start(self, config, **kwargs) -> None:
        self.check(config)

    def on_multirun_start(self, config, **kwargs) -> None:
        self.check(config)

    def on_job_end(self, config, job_return, **kwargs) -> None:
        """A job refused for bad input (the command-line checks, a data reader) ends in one line, as
        fairseq-train's does; hydra would print "Error executing job" and a traceback."""
        if job_return.status == JobStatus.FAILED and checks.report_bad_input(job_return._return_value):
            sys.exit(1)

    @staticmethod
    def check(config) -> None:
        """A BadInput as one line (hydra would print it with a traceback): before the launch, nothing is written."""
        try:
            check_model_name(config)
        except checks.BadInput as error:
            checks.print_error(str(error))
            sys.exit(2)
