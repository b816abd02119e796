"""Moving a run (fix optimizer_state_by_name): a checkpoint continues in another backend, world size or
precision with Adam's state mapped by parameter name. Tiny NormFormer LM, CPU/gloo, dropout 0, the move
at update 2 of epoch 1; every uninterrupted reference keeps its update-2 checkpoint, which the moved run
resumes from a copy of:

- FSDP per-layer (2 processes) -> 1 process (--update-freq 2), and 1 process (--update-freq 2) -> FSDP
  flat (2 processes): losses at updates 3-4 within 1e-5 of the reference's, Adam's moments equal by name;
- sources {1 process, FSDP per-layer, ZeRO --memory-efficient-fp16} loaded in this process into
  {fp32, --fp16, --memory-efficient-fp16, --bf16}: the new optimizer's fp32 moments equal the saved
  ones by name, the fp16 loss scale kept or dropped with one line; FSDP -> ZeRO --memory-efficient-fp16
  on 2 processes trains on;
- refusals: other parameters (one line, nothing written), FSDP shards into another layout."""
import shutil

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.trainer import Trainer

from fairseq_normformer.fixes import cpu_training, optimizer_state

from .fairseq_runs import (NO_DROPOUT, UPDATES, interval_checkpoint, logged_loss, logged_updates, tiny_lm_args, train,
                           train_in_process, train_one_rank_here)
from ..conftest import fairseq_config

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

MOVE = 2
TWO = ["--distributed-world-size", "2", "--distributed-backend", "gloo"]
FSDP = [*TWO, "--ddp-backend", "fully_sharded"]
SOURCES = {  # name: (arguments, updates): the references run to UPDATES, the others to the move
    "fsdp_layers": ([*FSDP, "--checkpoint-activations"], UPDATES),
    "zero_memory_efficient_fp16": ([*TWO, "--zero-sharding", "os", "--memory-efficient-fp16"], MOVE),
}
PRECISIONS = {"fp32": [], "fp16": ["--fp16"], "memory_efficient_fp16": ["--memory-efficient-fp16"], "bf16": ["--bf16"]}


def lm_args(corpus, save_dir, updates, *extra):
    return tiny_lm_args(corpus.data_bin, save_dir, *NO_DROPOUT, "--max-update", updates, *extra)


@pytest.fixture(scope="module")
def sources(lm_reference, tiny_lm_corpus, tmp_path_factory):
    """name -> save dir of each source run (a checkpoint at every update); "one_process" is the 1-process
    --update-freq 2 reference (conftest.py)."""
    save_dirs = {"one_process": lm_reference}
    for name, (extra, updates) in SOURCES.items():
        save_dirs[name] = tmp_path_factory.mktemp(name)
        train(lm_args(tiny_lm_corpus, save_dirs[name], updates, *extra))
    return save_dirs


def load(checkpoint) -> dict:
    return torch.load(checkpoint, map_location="cpu", weights_only=False)


def saved_moments(checkpoint) -> dict:
    """{parameter name: its Adam state} of a checkpoint, named without the fix: a full FSDP
    checkpoint's state is in the order of fairscale's metadata (wrapper by wrapper), the others' in
    the order of the model's weights."""
    state = load(checkpoint)
    if "fsdp_metadata" in state:
        names = [(wrapper["fsdp_path"] + "." if wrapper["fsdp_path"] else "") + name
                 for wrapper in state["fsdp_metadata"]["param_metadata"]
                 for backing in wrapper["params"].values() for name in backing["names"]]  # fmt: skip
    else:  # the model's weights minus its buffers (the version counter, a 1-element tensor)
        names = [name for name, weight in state["model"].items() if not name.endswith("version")]
    return {names[index]: entries for index, entries in state["last_optimizer_state"]["state"].items()}


def assert_same_moments(moments, reference, atol=0.0, rtol=0.0):
    assert moments.keys() == reference.keys()
    for name, entries in reference.items():
        assert int(moments[name]["step"]) == int(entries["step"]), name
        for buffer in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(moments[name][buffer].float().reshape(entries[buffer].shape), entries[buffer],
                                       atol=atol, rtol=rtol, msg=f"{name} {buffer}")  # fmt: skip


def moved_copy(sources, name, tmp_path):
    """A copy of the source's update-MOVE checkpoint, outside the source's save dir."""
    copy = tmp_path / f"{name}_{MOVE}.pt"
    shutil.copy(interval_checkpoint(sources[name], MOVE), copy)
    return copy


def continue_run(corpus, sources, source, tmp_path, *extra) -> str:
    save_dir = tmp_path / "moved"
    log = train_one_rank_here(lm_args(corpus, save_dir, UPDATES, *extra, "--restore-file", moved_copy(sources, source, tmp_path))).stdout
    assert "optimizer state moved by parameter name" in log
    return save_dir


@pytest.mark.parametrize("source, extra", [
    ("fsdp_layers", ["--update-freq", "2"]),  # FSDP per-layer, 2 processes -> 1 process, default backend
    ("one_process", FSDP),  # 1 process with --update-freq 2 -> FSDP flat, 2 processes
])  # fmt: skip
def test_moved_run_continues_as_the_uninterrupted_one(sources, source, extra, tiny_lm_corpus, tmp_path):
    moved = continue_run(tiny_lm_corpus, sources, source, tmp_path, *extra)
    for update in range(MOVE + 1, UPDATES + 1):
        reference = interval_checkpoint(sources[source], update)
        assert logged_loss(interval_checkpoint(moved, update)) == pytest.approx(logged_loss(reference), abs=1e-5)
        assert_same_moments(saved_moments(interval_checkpoint(moved, update)), saved_moments(reference), atol=1e-5, rtol=1e-4)


def trainer_loaded_from(corpus, checkpoint, tmp_path, *extra) -> Trainer:
    """fairseq-train's Trainer of one process (as fairseq_cli.train builds it), resumed from ``checkpoint``."""
    argv = [str(a) for a in lm_args(corpus, tmp_path / "unused", UPDATES, *extra, "--restore-file", checkpoint)]
    cfg = fairseq_config(options.parse_args_and_arch(options.get_training_parser(), argv))
    cpu_training.use_cpu_precision_paths(cfg)
    task = tasks.setup_task(cfg.task)
    trainer = Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))
    checkpoint_utils.load_checkpoint(cfg.checkpoint, trainer)
    return trainer


def loaded_moments(trainer) -> dict:
    """{parameter name: its state} in the trainer's optimizer: the fp32 one for every precision (the
    master copy's optimizer with --fp16/--bf16), one state per parameter, in the model's order."""
    torch_optimizer = trainer.optimizer.optimizer
    names = [name for name, _ in trainer.model.named_parameters()]
    return {name: torch_optimizer.state[p] for name, p in zip(names, torch_optimizer.param_groups[0]["params"])}


@pytest.mark.parametrize("source", ["one_process", "fsdp_layers", "zero_memory_efficient_fp16"])
def test_moments_carry_over_by_name_into_every_precision(sources, source, tiny_lm_corpus, tmp_path, caplog):
    checkpoint = moved_copy(sources, source, tmp_path)
    saved = saved_moments(checkpoint)
    for precision, extra in PRECISIONS.items():
        caplog.clear()
        trainer = trainer_loaded_from(tiny_lm_corpus, checkpoint, tmp_path, *extra)
        moments = loaded_moments(trainer)
        assert all(m["exp_avg"].dtype == torch.float32 for m in moments.values()), precision
        assert_same_moments(moments, saved)
        loss_scale = load(checkpoint)["last_optimizer_state"].get("loss_scale")
        dropped = [r.getMessage() for r in caplog.records if "loss scale" in r.getMessage()]
        if loss_scale is not None and precision in ("fp16", "memory_efficient_fp16"):
            assert trainer.optimizer.scaler.loss_scale == loss_scale and not dropped
        else:
            assert dropped == ([f"the checkpoint's fp16 loss scale ({loss_scale}) is dropped: "
                                f"{precision.replace('_', '-')} training scales no loss"] if loss_scale else [])  # fmt: skip


def test_fsdp_into_zero_sharding_and_memory_efficient_fp16_trains_on(sources, tiny_lm_corpus, tmp_path):
    """FSDP per-layer (fp32, 2 processes) -> --zero-sharding os --memory-efficient-fp16 (2 processes):
    the loss of the next update within 1e-2 of the fp32 reference's (fp16's rounding of the summed
    loss, as in test_fully_sharded.py)."""
    moved, extra = tmp_path / "moved", [*TWO, "--zero-sharding", "os", "--memory-efficient-fp16"]
    log = train(lm_args(tiny_lm_corpus, moved, MOVE + 1, *extra, "--restore-file", moved_copy(sources, "fsdp_layers", tmp_path))).stdout
    assert "optimizer state moved by parameter name" in log and sorted(logged_updates(log)) == [MOVE + 1]
    reference = logged_loss(interval_checkpoint(sources["one_process"], MOVE + 1))
    assert logged_loss(interval_checkpoint(moved, MOVE + 1)) == pytest.approx(reference, abs=1e-2)


def test_other_parameters_are_refused_in_one_line(sources, tiny_lm_corpus, tmp_path):
    checkpoint = moved_copy(sources, "fsdp_layers", tmp_path)
    before = checkpoint.read_bytes()
    save_dir = tmp_path / "refused"
    args = lm_args(tiny_lm_corpus, save_dir, UPDATES, "--decoder-ffn-embed-dim", "48", "--restore-file", checkpoint)
    result = train_in_process(args, check=False)  # as fairseq-train prints it (tests/test_bad_input.py: a real one)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("fairseq-train: error: the checkpoint's optimizer state (fully_sharded, 2 processes")
    assert "decoder.layers.0.fc1.weight has shape [64, 32] there and [48, 32] here" in last_line
    assert "Traceback" not in result.stderr
    assert checkpoint.read_bytes() == before and not any(save_dir.iterdir() if save_dir.exists() else [])


def test_fsdp_shards_move_nowhere_else(sharded_state_run, tiny_lm_corpus, tmp_path):
    """--use-sharded-state keeps each rank's part of the flat state (conftest.py's run): it continues only as it was saved."""
    with pytest.raises(ValueError, match=r"sharded state \(--use-sharded-state\) continues only with the same"):
        trainer_loaded_from(tiny_lm_corpus, sharded_state_run / "checkpoint_1_1-shard0.pt", tmp_path, "--fp16")


def test_flat_master_copy_is_the_parameters_in_order():
    """fairseq's flat fp32 master copy (--fp16 on GPUs, not run here): one tensor, the parameters'
    state concatenated in the model's order; converted to it and back by name."""
    params = [("a", [2, 3]), ("b", [4])]
    per_parameter = {"params": params, "groups": None, "state": "per_parameter"}
    flat = {**per_parameter, "state": "flat"}
    by_name = {name: {"step": 3, "exp_avg": torch.randn(shape), "exp_avg_sq": torch.rand(shape)} for name, shape in params}
    flat_state = optimizer_state.state_in_layout(by_name, flat, {"lr": 1.0})
    assert flat_state["param_groups"] == [{"lr": 1.0, "params": [0]}] and flat_state["state"][0]["step"] == 3
    torch.testing.assert_close(flat_state["state"][0]["exp_avg"], torch.cat([by_name["a"]["exp_avg"].flatten(), by_name["b"]["exp_avg"]]))
    back = optimizer_state.state_by_name(flat_state, flat)
    assert_same_moments(back, by_name)
    assert optimizer_state.state_in_layout(back, per_parameter, {"lr": 1.0})["state"][1]["exp_avg"].shape == (4,)
