"""Start-up. The package imported before fairseq registers nothing and imports neither torch nor fairseq
(the run launchers start in a fraction of a second); register() registers and applies the fixes (--user-dir,
which imports the package after fairseq, is run by every end-to-end test). The start-up hook install.sh
writes (fixes/startup.py): fairseq starts without scikit-learn and SciPy's stats, and the metric functions
fairseq imported from them give what the real ones give; an ``import sklearn`` afterwards is the real package."""
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
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

REGISTER_PROBE = """
import sys
import fairseq_normformer.cli.sweep, fairseq_normformer.paper
print("the launchers import:", [name for name in ("torch", "fairseq") if name in sys.modules])
import fairseq
from fairseq.distributed import utils as distributed_utils
from fairseq.models import ARCH_MODEL_REGISTRY
print("imported first:", "normformer_lm_gpt3_small" in ARCH_MODEL_REGISTRY, distributed_utils.call_main.__module__)
fairseq_normformer.register()
print("registered:", "normformer_lm_gpt3_small" in ARCH_MODEL_REGISTRY, distributed_utils.call_main.__module__)
"""


def test_the_package_imported_first_imports_nothing_of_fairseq_until_register():
    out = subprocess.run([sys.executable, "-c", REGISTER_PROBE], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["the launchers import: []", "imported first: False fairseq.distributed.utils",
                                "registered: True fairseq_normformer.fixes.cpu_training"]  # fmt: skip


@pytest.mark.slow
def test_fairseq_starts_without_sklearn_and_its_metrics_are_the_real_ones():
    assert (Path(sysconfig.get_paths()["purelib"]) / PTH_NAME).exists(), "scripts/install.sh writes it"
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["loaded at start: []", "real modules: ['module', 'module', 'module']",
                                "equal: [True, True, True, True, True]"]  # fmt: skip
