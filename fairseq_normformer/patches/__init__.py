"""Narrow import-time patches to fairseq 0.12, applied once when fairseq_normformer is imported
(``--user-dir``). Each patch is a named function or class that says which fairseq bug it fixes;
none changes what fairseq does on CUDA GPUs. See docs/distributed.md.

- cpu_training: data-parallel training without CUDA (spawn, torchrun, DDP on a CPU module),
  --bf16/--fp16 on CPU, and the command-line checks of fairseq_normformer/checks.py.
- checkpoints: SIGKILL-safe checkpoint writes, a clear error for a corrupt checkpoint, and a
  dictionary fingerprint checked on resume and evaluation.
"""
import argparse

import torch
from fairseq import checkpoint_utils

from .checkpoints import patch_checkpoints
from .cpu_training import patch_cpu_training

# Argparse-configured models (RobertaModel and ours built on it) and argparse-era fairseq checkpoints
# store an argparse.Namespace; torch >= 2.6 loads with weights_only=True, which refuses any class not
# allow-listed. A Namespace holds only command-line values.
torch.serialization.add_safe_globals([argparse.Namespace])

if not checkpoint_utils.torch_persistent_save.__module__.endswith(".patches.checkpoints"):  # once
    patch_cpu_training()
    patch_checkpoints()
