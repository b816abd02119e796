"""Fixes to fairseq's start-up, run at interpreter start by the ``.pth`` file that running this file
writes into the environment (scripts/install.sh does): they act before any plugin code can. Standard
library only: this file is loaded by path, before fairseq and without importing fairseq_normformer.

- Deferred metric imports. fairseq's start-up imports scikit-learn and SciPy for a few metric functions:
  ``fairseq.tasks`` imports every task module, ``audio_classification`` among them (``from sklearn import
  metrics``), and ``fairseq.criterions`` every criterion, ``sentence_prediction`` among them
  (``f1_score``, ``matthews_corrcoef``, ``pearsonr``, ``spearmanr``). That is about 1 s of the ~3.5 s every
  fairseq process (each CLI, each torchrun rank) takes to start on CPU, for functions only GLUE's metrics
  call. While each of the two modules executes, ``sklearn``, ``sklearn.metrics`` and ``scipy.stats`` are
  stand-ins whose functions import the real module on their first call; afterwards the stand-ins leave
  ``sys.modules``, so any other ``import sklearn`` gets the real one.
- Debug logging. ``fairseq.models.wav2vec.wav2vec2_classification`` calls ``logging.basicConfig(level=DEBUG)``
  when fairseq is imported: every CLI that imports fairseq before its own ``basicConfig`` (fairseq-eval-lm,
  -interactive, -generate, -hydra-train) then logs at DEBUG level, in the basic format, to stderr (hydra's
  "DEBUG:hydra.core.utils:Setting JobRuntime" lines). That call does nothing here, so each CLI's own applies.
- hydra's deprecation warnings about fairseq's code (warning_filters.py), some of which fairseq-hydra-train
  prints before it loads any plugin.
"""
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
import types

PTH_NAME = "fairseq_normformer_startup.pth"
OLD_PTH_NAMES = ("fairseq_normformer_deferred_metric_imports.pth",)  # written by earlier versions
DEFERRED = ("sklearn", "sklearn.metrics", "scipy.stats")


def deferred_function(module_name: str, name: str):
    def call(*args, **kwargs):
        return getattr(importlib.import_module(module_name), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = module_name
    return call


class StandIn(types.ModuleType):
    """A module whose submodules in DEFERRED are stand-ins and whose other attributes are deferred functions."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        full_name = f"{self.__name__}.{name}"
        return sys.modules[full_name] if full_name in DEFERRED else deferred_function(self.__name__, name)


class ChangingLoader(importlib.abc.Loader):
    """The module's own loader, executing it inside its IMPORTERS context."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, get_filename, ...: the file's own loader
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        with IMPORTERS[module.__name__]():
            self.loader.exec_module(module)


@contextlib.contextmanager
def deferred_metric_modules():
    stand_ins = {name: StandIn(name) for name in DEFERRED if name not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


@contextlib.contextmanager
def no_basic_config():
    basic_config, logging.basicConfig = logging.basicConfig, lambda *args, **kwargs: None
    try:
        yield
    finally:
        logging.basicConfig = basic_config


# fairseq's modules whose execution is changed, and how
IMPORTERS = {
    "fairseq.tasks.audio_classification": deferred_metric_modules,
    "fairseq.criterions.sentence_prediction": deferred_metric_modules,
    "fairseq.models.wav2vec.wav2vec2_classification": no_basic_config,
}


class ChangingFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in IMPORTERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = ChangingLoader(spec.loader)
        return spec


def silence_fairseq_hydra_warnings():
    """warning_filters.py (standard library only), loaded by path as this file is."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warning_filters.py")
    spec = importlib.util.spec_from_file_location("fairseq_normformer_startup_warning_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.silence_fairseq_hydra_warnings()


def install():
    if not any(isinstance(finder, ChangingFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, ChangingFinder())
        silence_fairseq_hydra_warnings()


def pth_line(hook_path: str) -> str:
    """One line of Python for a .pth file: load this file by path and install(); nothing if it was removed."""
    return (f"import importlib.util, os; p = {hook_path!r}; s = os.path.exists(p) and importlib.util."
            "spec_from_file_location('fairseq_normformer_startup', p); "
            "m = s and importlib.util.module_from_spec(s); m and (s.loader.exec_module(m) or m.install())\n")


if __name__ == "__main__":
    # the environment's site-packages, or a site directory given (scripts/gpu/run.sh: its --target folder)
    site_packages = sys.argv[1] if len(sys.argv) > 1 else sysconfig.get_paths()["purelib"]
    for old in OLD_PTH_NAMES:
        if os.path.exists(os.path.join(site_packages, old)):
            os.remove(os.path.join(site_packages, old))
    pth = os.path.join(site_packages, PTH_NAME)
    with open(pth, "w") as f:
        f.write(pth_line(os.path.abspath(__file__)))
    print(f"[install] {pth}: fairseq's start-up defers scikit-learn and SciPy, keeps INFO logging, "
          "and is spared hydra's warnings about fairseq's code")
