"""fairseq's start-up imports scikit-learn and SciPy for a few metric functions: ``fairseq.tasks``
imports every task module, ``audio_classification`` among them (``from sklearn import metrics``), and
``fairseq.criterions`` every criterion, ``sentence_prediction`` among them (``f1_score``,
``matthews_corrcoef``, ``pearsonr``, ``spearmanr``). That is about 1 s of the ~3.5 s every fairseq
process (each CLI, each torchrun rank) takes to start on CPU, for functions only GLUE's metrics call.

``install()``, run at interpreter start by the ``.pth`` file that running this file writes into the
environment (scripts/install.sh does), defers those
imports: while each of the two modules executes, ``sklearn``, ``sklearn.metrics`` and ``scipy.stats``
are stand-ins whose functions import the real module on their first call; afterwards the stand-ins
leave ``sys.modules``, so any other ``import sklearn`` gets the real one. Standard library only: this
file is loaded by path, before fairseq and without importing fairseq_normformer.
"""
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import sysconfig
import types

PTH_NAME = "fairseq_normformer_deferred_metric_imports.pth"
IMPORTERS = ("fairseq.tasks.audio_classification", "fairseq.criterions.sentence_prediction")
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


class DeferringLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, get_filename, ...: the file's own loader
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        stand_ins = {name: StandIn(name) for name in DEFERRED if name not in sys.modules}
        sys.modules.update(stand_ins)
        try:
            self.loader.exec_module(module)
        finally:
            for name, stand_in in stand_ins.items():
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]


class DeferringFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in IMPORTERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = DeferringLoader(spec.loader)
        return spec


def install():
    if not any(isinstance(finder, DeferringFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, DeferringFinder())


def pth_line(hook_path: str) -> str:
    """One line of Python for a .pth file: load this file by path and install(); nothing if it was removed."""
    return (f"import importlib.util, os; p = {hook_path!r}; s = os.path.exists(p) and importlib.util."
            "spec_from_file_location('fairseq_normformer_deferred_metric_imports', p); "
            "m = s and importlib.util.module_from_spec(s); m and (s.loader.exec_module(m) or m.install())\n")


if __name__ == "__main__":
    pth = os.path.join(sysconfig.get_paths()["purelib"], PTH_NAME)
    with open(pth, "w") as f:
        f.write(pth_line(os.path.abspath(__file__)))
    print(f"[install] {pth}: fairseq's start-up defers scikit-learn and SciPy to their first call")
