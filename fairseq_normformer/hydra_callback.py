"""fairseq-hydra-train loads ``common.user_dir`` only inside fairseq's train.main, after it has launched
the run: the plugin's launch-time fixes (the command-line checks, save-on-signal, one process per rank
on CPU) would miss it. Hydra instantiates the callbacks of ``hydra.callbacks`` when it starts, before
the job; naming this one there imports the plugin first (docs/hydra.md):

    hydra:
      callbacks:
        normformer:
          _target_: fairseq_normformer.hydra_callback.LoadPlugin
"""
from hydra.experimental.callback import Callback

import fairseq_normformer  # noqa: F401  (registers the models, tasks and criterions; applies the fixes)


class LoadPlugin(Callback):
    """Does nothing but exist: importing its module is what loads the plugin."""
