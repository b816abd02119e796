"""Start-up. The run launchers (normformer-sweep, normformer-paper-settings) import neither fairseq nor torch; any
other import of the package registers it and applies the fixes. The start-up hook install.sh
writes (fixes/startup.py): fairseq starts without scikit-learn and SciPy's stats, and the metric functions
fairseq imported from them give what the real ones give; an ``import sklearn`` afterwards is the real package."""
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import fairseq_normformer
from fairseq_normformer.fixes.startup import PTH_NAME

PROBE = """
import sys
import numpy as np
import fairseq
deferred = ("sklearn", "sklearn.metrics", "scipy.stats")
print("loaded at start:", [name for name in deferred if name in sys.modules])
from fairseq.criterions import sentence_prediction as fairseq_metrics
from fairseq.tasks import audio_classification
y, p = np.array([0, 1, 1, 0, 1, 1]), np.array([0, 1, 0, 0, 1, 0])
a, b = np.array([1.0, 2, 3, 4, 5, 6]), np.array([1.0, 3, 2, 5, 4, 7])
theirs = [fairseq_metrics.f1_score(y, p), fairseq_metrics._matthews_corrcoef(y, p), fairseq_metrics.pearsonr(a, b)[0],
          fairseq_metrics.spearmanr(a, b)[0], audio_classification.sklearn_metrics.roc_auc_score(y, a)]
import scipy.stats, sklearn.metrics
real = [sklearn.metrics.f1_score(y, p), sklearn.metrics.matthews_corrcoef(y, p), scipy.stats.pearsonr(a, b)[0],
        scipy.stats.spearmanr(a, b)[0], sklearn.metrics.roc_auc_score(y, a)]
print("real modules:", [type(sys.modules[name]).__name__ for name in deferred])
print("equal:", [float(x) == float(r) for x, r in zip(theirs, real)])
"""

IMPORTED = """
import sys
import fairseq_normformer
from fairseq.distributed import utils as distributed_utils
from fairseq.models import ARCH_MODEL_REGISTRY
print("normformer_lm_gpt3_small" in ARCH_MODEL_REGISTRY, distributed_utils.call_main.__module__)
"""


def imported_modules(*argv) -> set:
    """The modules ``python -X importtime ARGV`` imported."""
    err = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True).stderr
    return set(re.findall(r"^import time: .*\| +(\S+)$", err, re.M))


def test_the_launchers_import_neither_fairseq_nor_torch_and_any_other_import_registers():
    for module, script in fairseq_normformer.LAUNCHERS.items():
        console_script = shutil.which(script, path=Path(sys.executable).parent)  # the venv's, whatever PATH says
        assert console_script, f"{script} is not installed beside {sys.executable}: run scripts/install.sh"
        for argv in (["-m", module, "--help"], [console_script, "--help"]):
            assert {"torch", "fairseq"}.isdisjoint(imported_modules(*argv)), argv
    out = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "fairseq_normformer.fixes.cpu_training"]


@pytest.mark.slow
def test_fairseq_starts_without_sklearn_and_its_metrics_are_the_real_ones():
    assert (Path(sysconfig.get_paths()["purelib"]) / PTH_NAME).exists(), "scripts/install.sh writes it"
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["loaded at start: []", "real modules: ['module', 'module', 'module']",
                                "equal: [True, True, True, True, True]"]  # fmt: skip
