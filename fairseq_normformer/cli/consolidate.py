"""normformer-consolidate: the shards of a ``--ddp-backend fully_sharded --use-sharded-state`` checkpoint
(``checkpoint_last-shard0.pt``, ``-shard1.pt``, ...) as one ordinary checkpoint, which fairseq-eval-lm,
fairseq-generate and normformer-export-hf load::

    normformer-consolidate checkpoints/checkpoint_last.pt checkpoints/checkpoint_last_full.pt

The weights are joined by fairscale's ``consolidate_shard_weights`` (what fairseq's loaders do with
--checkpoint-shard-count); the optimizer state stays in the shards (it is sharded per FSDP instance),
so training resumes from the shards, not from the consolidated file.
"""
import argparse
import re
import sys
from pathlib import Path

from fairscale.nn.data_parallel import FullyShardedDataParallel
from fairseq import checkpoint_utils
from omegaconf import OmegaConf



def shard_paths(checkpoint: Path) -> list:
    """``dir/name.pt`` -> ``[dir/name-shard0.pt, dir/name-shard1.pt, ...]``, every shard present."""
    pattern = re.compile(re.escape(checkpoint.stem) + r"-shard(\d+)\.pt")
    found = {int(m.group(1)): p for p in checkpoint.parent.glob(f"{checkpoint.stem}-shard*.pt") if (m := pattern.fullmatch(p.name))}
    if not found:
        raise ValueError(f"no shards {checkpoint.stem}-shard<N>.pt next to {checkpoint}{shard_name_hint(checkpoint)}")
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise ValueError(f"shard {missing[0]} of {checkpoint} is missing ({len(found)} of {max(found) + 1} found)")
    return [found[rank] for rank in range(len(found))]


def shard_name_hint(checkpoint: Path) -> str:
    """For a shard's own name (``checkpoint_last-shard0.pt``): the name to give instead."""
    shard = re.fullmatch(r"(.+)-shard\d+\.pt", checkpoint.name)
    return f": name the checkpoint without -shard<N>, {checkpoint.with_name(shard.group(1) + '.pt')}" if shard else ""


def consolidate(checkpoint: Path) -> dict:
    """Shard 0's checkpoint with the full model weights in place of its shard, and no optimizer state."""
    states = [checkpoint_utils.load_checkpoint_to_cpu(str(path)) for path in shard_paths(checkpoint)]
    if any("fsdp_metadata" not in state for state in states):
        raise ValueError(f"{checkpoint}'s shards were not written by --ddp-backend fully_sharded --use-sharded-state")
    world_size = states[0]["cfg"]["distributed_training"]["distributed_world_size"]
    if len(states) != world_size:
        raise ValueError(f"{checkpoint} was written by {world_size} processes but {len(states)} shards were found")
    full = dict(states[0])
    full["model"] = FullyShardedDataParallel.consolidate_shard_weights(
        shard_weights=[state["model"] for state in states],
        shard_metadata=[state["fsdp_metadata"] for state in states],
        with_module_buffers=False,  # fairscale looks up every buffer, also the non-persistent ones
    )
    shard_weights, metadata = states[0]["model"], states[0]["fsdp_metadata"]
    full["model"].update({name: shard_weights[name] for name in metadata["buffer_names"] if name in shard_weights})
    del full["fsdp_metadata"], full["last_optimizer_state"]
    full["cfg"] = OmegaConf.to_container(full["cfg"])  # as fairseq saves it (loading made it a DictConfig)
    full["cfg"]["distributed_training"]["use_sharded_state"] = False
    return full


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="normformer-consolidate", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path, help="the sharded checkpoint's name without -shard<N>, e.g. save/checkpoint_last.pt")
    p.add_argument("output", type=Path, help="the ordinary checkpoint to write (must not exist)")
    return p


def main(argv=None):
    args = get_parser().parse_args(argv)
    try:
        if args.output.exists():
            raise ValueError(f"{args.output} exists: pass another output path")
        full = consolidate(args.checkpoint)
    except ValueError as e:
        sys.exit(f"normformer-consolidate: error: {e}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    checkpoint_utils.torch_persistent_save(full, str(args.output))
    print(f"normformer-consolidate: {len(full['model'])} tensors of {args.checkpoint} written to {args.output}")


if __name__ == "__main__":
    main()
