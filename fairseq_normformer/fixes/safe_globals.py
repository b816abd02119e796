"""What torch >= 2.6's weights_only loading must accept in fairseq checkpoints. Imports only torch and
numpy, so that scripts/fairseq_suite.py can apply this allow-list alone (without the other fixes) to
tell "broken by torch" from "broken by the plugin"."""
import argparse

import numpy
import torch


def allow_namespace_checkpoints() -> None:
    """Argparse-configured models (RobertaModel and ours built on it) and argparse-era fairseq
    checkpoints store an argparse.Namespace; torch >= 2.6 loads with weights_only=True, which
    refuses any class not allow-listed. A Namespace holds only command-line values."""
    torch.serialization.add_safe_globals([argparse.Namespace])


def allow_metric_arrays_in_checkpoints() -> None:
    """fairseq saves its metrics' state in every checkpoint; ``--eval-bleu`` keeps BLEU's n-gram counts
    there as numpy arrays, which torch >= 2.6's weights_only loading refuses (fairseq-generate cannot
    load the checkpoint). Allow-list what a numpy array or scalar pickles as: data, not code."""
    from numpy.core.multiarray import _reconstruct, scalar

    dtypes = {type(numpy.dtype(name)) for name in ("int64", "int32", "float64", "float32")}
    torch.serialization.add_safe_globals([_reconstruct, scalar, numpy.ndarray, numpy.dtype, *dtypes])
