"""Checkpoints move between backends, world sizes and precisions: the optimizer state is mapped by
parameter name, never by position.

fairseq loads Adam's state by position. Each configuration keeps it in its own order and shape:
one process, DDP and ``--zero-sharding os`` per parameter in the model's order; fairseq's flat fp16
master copy (``--fp16`` on GPUs) as one flat tensor; a full FSDP checkpoint per parameter in FSDP's
order (each wrapper's parameters, root first) with a ``param_id_map``; ``--use-sharded-state`` as
each rank's flat shard. A checkpoint continued in another configuration failed (a size mismatch in
Adam, ``KeyError: 'param_id_map'``, "Optimizer does not match") or, where shapes coincide, put the
moments on the wrong parameters without an error.

Every checkpoint records its *layout* (``extra_state["optimizer_layout"]``): the parameters' names
and shapes in the order of the saved state, and whether it is per parameter, flat or sharded.
Checkpoints without one (fairseq's, or written with NORMFORMER_CHECKPOINT_CHECKS=0) have it
inferred: FSDP's from its ``fsdp_metadata``, the others' from the order of their model weights. When
the layout differs from the resuming run's, the state is converted by name on the rank that loads
the checkpoint, before fairseq shards or broadcasts it.
"""
import logging
from contextvars import ContextVar
from itertools import chain

import torch
from fairseq import checkpoint_utils, optim
from fairseq.trainer import Trainer

from ..checks import BadInput
from .checkpoints import checkpoint_checks_on

logger = logging.getLogger(__name__)

_fairseq_load_checkpoint = checkpoint_utils.load_checkpoint
_fairseq_upgrade_state_dict = checkpoint_utils._upgrade_state_dict
_fairseq_save_checkpoint = Trainer.save_checkpoint

LAYOUT_KEY = "optimizer_layout"
PRECISION_WRAPPERS = ("FP16Optimizer", "MemoryEfficientFP16Optimizer")
_resuming = ContextVar("resuming", default=None)  # (trainer, its checkpoint config) in load_checkpoint


# --- layouts ---------------------------------------------------------------------------------------
def precision(cfg) -> str:
    common = cfg.common
    if common.bf16:
        return "memory-efficient-bf16" if common.memory_efficient_bf16 else "bf16"
    if common.fp16:
        return "memory-efficient-fp16" if common.memory_efficient_fp16 else "fp16"
    return "fp32"


def has_loss_scale(cfg) -> bool:
    """fairseq's fp16 optimizers scale the loss; with --bf16 (and in fp32) there is no scale."""
    return bool(cfg.common.fp16 and not cfg.common.bf16)


def optimizer_class_name(trainer) -> str:
    """The class of the optimizer Trainer._build_optimizer builds for this configuration."""
    common = trainer.cfg.common
    if trainer.is_fsdp and common.fp16 or common.memory_efficient_fp16 or common.memory_efficient_bf16:
        return "MemoryEfficientFP16Optimizer"
    if common.fp16 or common.bf16:
        return "FP16Optimizer"
    return optim.OPTIMIZER_REGISTRY[trainer.cfg.optimizer._name].__name__


def flat_master_copy(trainer) -> bool:
    """fairseq's FP16Optimizer flattens the fp32 master copy into one tensor (GPUs, --fp16)."""
    common = trainer.cfg.common
    return bool(common.fp16 and not common.bf16 and not common.memory_efficient_fp16
                and not common.fp16_no_flatten_grads and not trainer.is_fsdp)  # fmt: skip


def fsdp_parameter_order(metadata: dict):
    """(names and shapes in FSDP's optimizer order, parameters per non-empty wrapper) from fairscale's
    ``local_metadata_dict()`` (the ``fsdp_metadata`` of a checkpoint)."""
    params, groups = [], []
    for wrapper in metadata["param_metadata"]:
        prefix = wrapper["fsdp_path"] + "." if wrapper["fsdp_path"] else ""
        names = [(prefix + name, list(shape)) for backing in wrapper["params"].values()
                 for name, shape in zip(backing["names"], backing["shapes"])]  # fmt: skip
        if names:
            params += names
            groups.append(len(names))
    return params, groups


def current_layout(trainer) -> dict:
    """The layout this trainer's optimizer saves and loads (no collective: rank 0 calls it alone)."""
    cfg, model = trainer.cfg, trainer._model
    layout = {"precision": precision(cfg), "backend": cfg.distributed_training.ddp_backend,
              "world_size": trainer.data_parallel_world_size, "groups": None}  # fmt: skip
    if cfg.distributed_training.zero_sharding == "os":
        layout["backend"] += " --zero-sharding os"
    if hasattr(model, "local_metadata_dict"):  # fairscale's FSDP
        layout["params"], layout["groups"] = fsdp_parameter_order(model.local_metadata_dict())
        layout["state"] = "sharded" if cfg.distributed_training.use_sharded_state else "per_parameter"
        return layout
    named = chain(model.named_parameters(), (("criterion." + n, p) for n, p in trainer._criterion.named_parameters()))
    layout["params"] = [(name, list(p.shape)) for name, p in named if p.requires_grad]
    layout["state"] = "flat" if flat_master_copy(trainer) else "per_parameter"
    return layout


def inferred_layout(state: dict, current: dict) -> dict:
    """The layout of a checkpoint that records none: FSDP's from its metadata; otherwise the model's
    order (that of its weights), one flat tensor if an FP16Optimizer saved a single state entry."""
    optimizer_state = state["last_optimizer_state"]
    if "fsdp_metadata" in state:
        params, groups = fsdp_parameter_order(state["fsdp_metadata"])
        kind = "per_parameter" if "param_id_map" in optimizer_state else "sharded"
        return {"params": params, "groups": groups, "state": kind, **saved_by(state)}
    parameters = {name for name, _ in current["params"]}
    params = [(name, list(w.shape)) for name, w in state["model"].items() if name in parameters]
    flat = state["optimizer_history"][-1]["optimizer_name"] == "FP16Optimizer" and len(params) > 1 and (
        len(optimizer_state["state"]) == 1 and list(optimizer_state["param_groups"][0]["params"]) == [0]
    )
    return {"params": params, "groups": None, "state": "flat" if flat else "per_parameter", **saved_by(state)}


def saved_by(state: dict) -> dict:
    """The backend and world size of the run that saved a checkpoint, from its config."""
    distributed = (state.get("cfg") or {}).get("distributed_training") or {}
    return {"backend": distributed.get("ddp_backend", "?"), "world_size": distributed.get("distributed_world_size", "?")}


def structure(layout: dict) -> tuple:
    """What decides where each state value lies (a shard's also depends on the number of processes)."""
    shards = layout["world_size"] if layout["state"] == "sharded" else None
    return layout["state"], [(name, list(shape)) for name, shape in layout["params"]], layout["groups"], shards


def describe(layout: dict) -> str:
    return f"{layout['backend']}, {layout['world_size']} processes, {layout['state'].replace('_', ' ')} state"


# --- conversion ------------------------------------------------------------------------------------
def refuse(why: str, saved: dict):
    raise BadInput(
        f"the checkpoint's optimizer state ({describe(saved)}) cannot be moved to this run: {why}; "
        "resume with the configuration that saved it, or pass --reset-optimizer to start Adam afresh"
    )


def state_by_name(optimizer_state: dict, layout: dict) -> dict:
    """{parameter name: {"exp_avg": tensor shaped as the parameter, ..., "step": ...}}."""
    names = [name for name, _ in layout["params"]]
    shapes = [torch.Size(shape) for _, shape in layout["params"]]
    if len(optimizer_state["param_groups"]) != 1:
        refuse("it has several parameter groups", layout)
    saved = optimizer_state["state"]
    if layout["state"] == "flat":
        numels = [shape.numel() for shape in shapes]
        if any(torch.is_tensor(v) and v.dim() > 0 and v.numel() != sum(numels) for v in saved.get(0, {}).values()):
            refuse(f"its flat state does not hold the {sum(numels)} values of the checkpoint's parameters", layout)
        by_name = {name: {} for name in names} if saved else {}
        for key, value in saved.get(0, {}).items():
            pieces = value.split(numels) if torch.is_tensor(value) and value.dim() > 0 else [value] * len(names)
            for name, shape, piece in zip(names, shapes, pieces):
                by_name[name][key] = piece.reshape(shape) if torch.is_tensor(piece) and piece.dim() > 0 else piece
        return by_name
    if len(optimizer_state["param_groups"][0]["params"]) != len(names):  # position would be ambiguous
        count = len(optimizer_state["param_groups"][0]["params"])
        refuse(f"it holds state for {count} parameters where the checkpoint's model has {len(names)}", layout)
    by_name = {}
    for index, entries in saved.items():
        by_name[names[index]] = {}
        for key, value in entries.items():
            if torch.is_tensor(value) and value.dim() > 0:
                if value.numel() != shapes[index].numel():
                    refuse(f"its {key} of {names[index]} has {value.numel()} values, not {shapes[index].numel()}", layout)
                value = value.reshape(shapes[index])
            by_name[names[index]][key] = value
    return by_name


def state_in_layout(by_name: dict, layout: dict, param_group: dict) -> dict:
    """The optimizer state dict a run of ``layout`` loads (before fairseq shards or broadcasts it)."""
    names = [name for name, _ in layout["params"]]
    if layout["state"] == "flat":
        entries = {}
        if by_name:
            first = by_name[names[0]]
            for key, value in first.items():
                tensor = torch.is_tensor(value) and value.dim() > 0
                entries[key] = torch.cat([by_name[name][key].reshape(-1) for name in names]) if tensor else value
        return {"state": {0: entries} if entries else {}, "param_groups": [{**param_group, "params": [0]}]}
    converted = {
        "state": {index: by_name[name] for index, name in enumerate(names) if name in by_name},
        "param_groups": [{**param_group, "params": list(range(len(names)))}],
    }
    if layout["groups"] is not None:  # fairscale's full FSDP state: global (per parameter) -> local (wrapper) ids
        wrapper_of = chain.from_iterable([local] * count for local, count in enumerate(layout["groups"]))
        converted["param_id_map"] = dict(enumerate(wrapper_of))
        converted["uncollected_local_ids"] = []
    return converted


def check_same_parameters(saved: dict, current: dict) -> None:
    saved_shapes, current_shapes = dict(structure(saved)[1]), dict(structure(current)[1])
    missing = sorted(set(current_shapes) - set(saved_shapes))
    unexpected = sorted(set(saved_shapes) - set(current_shapes))
    if missing or unexpected:
        refuse(f"its parameters are not this model's (missing: {missing[:3]}, unexpected: {unexpected[:3]})", saved)
    for name, shape in saved_shapes.items():
        if shape != current_shapes[name]:
            refuse(f"{name} has shape {shape} there and {current_shapes[name]} here", saved)


def move_parameters(state: dict, saved: dict, current: dict) -> None:
    if "sharded" in (saved["state"], current["state"]):
        refuse("sharded state (--use-sharded-state) continues only with the same processes and wrapping", saved)
    check_same_parameters(saved, current)
    optimizer_state = state["last_optimizer_state"]
    by_name = state_by_name(optimizer_state, saved)
    param_group = {k: v for k, v in optimizer_state["param_groups"][0].items() if k != "params"}
    moved = state_in_layout(by_name, current, param_group)
    extras = {k: v for k, v in optimizer_state.items() if k not in ("state", "param_groups", "param_id_map", "uncollected_local_ids")}
    state["last_optimizer_state"] = {**moved, **extras}
    logger.info(f"optimizer state moved by parameter name: {describe(saved)} -> {describe(current)}")


def move_precision(state: dict, trainer) -> None:
    """fairseq refuses a checkpoint whose optimizer class differs ("Optimizer does not match"): the fp16
    wrappers keep the same fp32 Adam state as the optimizer they wrap, which carries over as it is."""
    history, optimizer_state = state["optimizer_history"][-1], state["last_optimizer_state"]
    name = optimizer_class_name(trainer)
    if history["optimizer_name"] != name and {history["optimizer_name"], name} & set(PRECISION_WRAPPERS):
        history["optimizer_name"] = name
    if "loss_scale" in optimizer_state and not has_loss_scale(trainer.cfg):
        logger.warning(f"the checkpoint's fp16 loss scale ({optimizer_state.pop('loss_scale')}) is dropped: "
                       f"{precision(trainer.cfg)} training scales no loss")  # fmt: skip


def move_optimizer_state(state: dict, saved: dict, current: dict, trainer) -> None:
    if structure(saved) != structure(current):
        move_parameters(state, saved, current)
    move_precision(state, trainer)


# --- hooks -----------------------------------------------------------------------------------------
def save_checkpoint(self, filename, extra_state):
    """Records the optimizer state's layout in every checkpoint (with the checkpoint checks on)."""
    if checkpoint_checks_on():
        extra_state = {**extra_state, LAYOUT_KEY: current_layout(self)}
    return _fairseq_save_checkpoint(self, filename, extra_state)


def load_checkpoint(cfg, trainer, **passthrough_args):
    """fairseq-train's resume: the checkpoint that Trainer.load_checkpoint reads is converted for ``trainer``."""
    token = _resuming.set(None if cfg.finetune_from_model else (trainer, cfg))
    try:
        return _fairseq_load_checkpoint(cfg, trainer, **passthrough_args)
    finally:
        _resuming.reset(token)


def upgrade_state_dict(state):
    """fairseq's upgrade of a loaded checkpoint, then, while fairseq-train resumes, its optimizer state
    moved to the resuming run's layout (unless --reset-optimizer); the data position: data_position.py."""
    state = _fairseq_upgrade_state_dict(state)
    if _resuming.get() is None:
        return state
    trainer, checkpoint_cfg = _resuming.get()
    current = current_layout(trainer)
    recorded = (state.get("extra_state") or {}).get(LAYOUT_KEY)
    if isinstance(state.get("last_optimizer_state"), dict) and not checkpoint_cfg.reset_optimizer:
        check_model_weights = getattr(trainer._model, "check_checkpoint_weights", None)
        if check_model_weights:  # the model's refusal names the flag to pass; ours would name a parameter
            check_model_weights(state["model"])
        move_optimizer_state(state, recorded or inferred_layout(state, current), current, trainer)
    return state
