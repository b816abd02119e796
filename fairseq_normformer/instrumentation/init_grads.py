"""Xiong et al.'s gradient norm at initialization ("On Layer Normalization in the Transformer
Architecture", 2020, Fig. 3 and Theorem 1): the Frobenius norm of the gradient of the last FFN weight
(fc2) in each layer of a freshly initialised model, for one batch of real data. Post-LN's grows with
the layer index (near the output it is large, which is why it needs warmup); Pre-LN's stays flat.

The model, task, criterion and batch are fairseq-train's, built from fairseq-train arguments (any
architecture: translation encoder-decoders and LMs). The gradient is that of the loss per target token
(the criterion's loss divided by its sample size, as fairseq's trainer normalizes), in eval mode (no
dropout: the measurement is of the architecture, as in Xiong et al.'s analysis).
"""
import re
from typing import Dict, List

import torch
from fairseq import options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from ..fixes.batches import training_batches
from .param_groups import param_group, strip_wrappers

_STACK = re.compile(r"^(?:(\w+)\.)?layers\.\d+\.")  # "encoder.layers.3.fc2.weight" -> encoder


def build_at_init(train_args: List[str], subset: str = "train"):
    """(model, criterion, first batch of ``subset``) as fairseq-train would build them from
    ``train_args`` (data directory first), the model at its initialization (``--seed``)."""
    args = options.parse_args_and_arch(options.get_training_parser(), train_args)
    cfg = convert_namespace_to_omegaconf(args)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    task.load_dataset(subset, combine=False, epoch=1)
    with training_batches():  # fairseq-train's batches: without the ones fixes/batches.py adds to evaluation
        batches = task.get_batch_iterator(
            dataset=task.dataset(subset), max_tokens=cfg.dataset.max_tokens, max_sentences=cfg.dataset.batch_size,
            max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
            ignore_invalid_inputs=True, required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
            seed=cfg.common.seed,
        ).next_epoch_itr(shuffle=True)  # fmt: skip
    return model, criterion, next(iter(batches))


def layer_grad_norms(model, param: str = "fc2.weight") -> Dict[str, Dict[int, float]]:
    """{stack ("encoder", "decoder", ...): {layer: ||grad||_F}} of the parameter named ``param``
    inside each layer (after a backward pass)."""
    norms: Dict[str, Dict[int, float]] = {}
    for name, weight in model.named_parameters():
        group, match = param_group(name), _STACK.search(strip_wrappers(name))
        if group.layer is None or group.local != param or match is None:
            continue
        if weight.grad is None:
            raise ValueError(f"{name} has no gradient")
        norms.setdefault(match.group(1) or "layers", {})[group.layer] = weight.grad.norm().item()
    if not norms:
        raise ValueError(f"the model has no parameter {param!r} inside its layers")
    return {stack: dict(sorted(by_layer.items())) for stack, by_layer in norms.items()}


def init_grad_norms(model, criterion, sample, param: str = "fc2.weight") -> Dict[str, Dict[int, float]]:
    """One backward pass of the loss per target token on ``sample``; ``layer_grad_norms``."""
    model.eval()
    model.zero_grad()
    loss, sample_size, _ = criterion(model, sample)
    (loss / sample_size).backward()
    return layer_grad_norms(model, param)
