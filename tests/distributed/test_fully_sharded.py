"""Fully sharded training (--ddp-backend fully_sharded, fairscale's FSDP) on CPU (gloo): 2 sharded
processes follow 1 unsharded process with --update-freq 2 (the same 2 batches per update, dropout 0)
in losses, weights and Adam's state; with one flat shard and with every layer wrapped (--min-params-to-wrap,
--checkpoint-activations); in fp16; resumed from a full and from a sharded (--use-sharded-state)
checkpoint, bit-identically in fp16 and after one of 2 torchrun nodes was SIGKILLed (the other exits at
once); one process (with and without --cpu-offload) trains and resumes as the unsharded process, and
continues a 2-process run; and a sharded checkpoint consolidated by normformer-consolidate evaluates and exports
as the full one."""
import importlib.util
import re
import shutil
import sys

import pytest
import torch
from fairseq_cli import train
from safetensors.torch import load_file

from fairseq_normformer.checks import BadInput
from fairseq_normformer.cli import consolidate, export_hf

from ..conftest import USER_DIR, run_cli
from .fairseq_runs import NO_DROPOUT, SHARDED, UPDATES, interval_checkpoint, logged_loss, tiny_lm_args, warning_free_run
from .fairseq_runs import train as fairseq_train
from .test_resume_data_parallel import kill_node_1_then_resume

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

FP16_LAYERS = [*SHARDED, "--min-params-to-wrap", "1", "--fp16"]  # every layer its own FSDP instance
ZERO_GRADIENT = "self_attn.k_proj.bias"  # its gradient is 0 in exact arithmetic (see test_data_parallel.py)


def lm_args(corpus, save_dir, *extra):
    return tiny_lm_args(corpus.data_bin, save_dir, *NO_DROPOUT, "--max-update", UPDATES, *extra)


def load(checkpoint) -> dict:
    return torch.load(checkpoint, map_location="cpu", weights_only=False)


def assert_same_state(reference, run, atol=1e-5, rtol=1e-4):
    """Weights (to atol) and Adam's exp_avg/exp_avg_sq (to atol and rtol) of two checkpoints of the
    same model, or of the same rank's shards (the optimizer state of fairscale's full checkpoint is
    keyed as the unsharded optimizer's)."""
    reference, run = load(reference), load(run)
    for name, weight in reference["model"].items():
        if not name.endswith(ZERO_GRADIENT):
            torch.testing.assert_close(run["model"][name].float(), weight.float(), atol=atol, rtol=0, msg=name)
    states = reference["last_optimizer_state"]["state"], run["last_optimizer_state"]["state"]
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        for buffer in ("exp_avg", "exp_avg_sq"):  # the corrupted consolidation saved exp_avg == exp_avg_sq
            torch.testing.assert_close(states[1][key][buffer], states[0][key][buffer], atol=atol, rtol=rtol)


def assert_same_losses(reference_dir, run_dir, updates, abs):
    for update in updates:
        loss = logged_loss(interval_checkpoint(run_dir, update))
        assert loss == pytest.approx(logged_loss(interval_checkpoint(reference_dir, update)), abs=abs), update


@pytest.fixture(scope="module")
def runs(lm_reference, sharded_state_run, tiny_lm_corpus, tmp_path_factory):
    """save dir -> its run: the 1-process reference (--update-freq 2) and the sharded runs compared with it
    (the reference and layers_sharded_state from conftest.py)."""
    saved = {"reference": lm_reference, "layers_sharded_state": sharded_state_run}
    for name, extra in {"flat": SHARDED, "layers_fp16": FP16_LAYERS}.items():
        save_dir = tmp_path_factory.mktemp(name)
        saved[name] = warning_free_run(lm_args(tiny_lm_corpus, save_dir, *extra), save_dir)
    return saved


def fsdp_instances(checkpoint) -> int:
    """How many FSDP wrappers wrote the checkpoint: the root, and one per wrapped layer."""
    return len(load(checkpoint)["fsdp_metadata"]["param_metadata"])


def test_one_flat_shard_matches_update_freq_two(runs):
    assert fsdp_instances(interval_checkpoint(runs["flat"], UPDATES)) == 1
    assert_same_losses(runs["reference"], runs["flat"], range(1, UPDATES + 1), abs=1e-5)
    for update in range(1, UPDATES + 1):
        assert_same_state(interval_checkpoint(runs["reference"], update), interval_checkpoint(runs["flat"], update))


def all_weights(checkpoint) -> torch.Tensor:
    return torch.cat([w.float().flatten() for name, w in sorted(load(checkpoint)["model"].items()) if not name.endswith(ZERO_GRADIENT)])


def test_fp16_layer_shards_follow_update_freq_two(runs):
    """fp16 against the fp32 reference, within what fp16's rounding allows. The loss of a batch is
    summed in fp16 (~1900 nats, where fp16's resolution is 1 nat = 0.006 bits a token): losses to 1e-2
    (measured 2.4e-4). Adam's normalised steps turn rounding into element-wise differences of up to lr
    per update, so the weights are compared as a whole: within 10% of how far the last 3 updates moved
    them (measured 3%; 1 process with --fp16 is 4% from fp32; a lost or doubled update is >= 33%)."""
    run, reference = runs["layers_fp16"], runs["reference"]
    assert fsdp_instances(interval_checkpoint(run, UPDATES)) == 3  # the root and the 2 layers
    assert_same_losses(reference, run, range(1, UPDATES + 1), abs=1e-2)
    reference_weights, run_weights = all_weights(interval_checkpoint(reference, UPDATES)), all_weights(interval_checkpoint(run, UPDATES))
    moved = (reference_weights - all_weights(interval_checkpoint(reference, 1))).norm()
    assert (run_weights - reference_weights).norm() <= 0.1 * moved


def test_resume_from_full_checkpoint_matches_uninterrupted_run(runs, tiny_lm_corpus, tmp_path):
    middle = interval_checkpoint(runs["flat"], UPDATES // 2)
    fairseq_train(lm_args(tiny_lm_corpus, tmp_path, *SHARDED, "--restore-file", middle))
    assert_same_losses(runs["flat"], tmp_path, range(UPDATES // 2 + 1, UPDATES + 1), abs=1e-5)
    assert_same_state(interval_checkpoint(runs["flat"], UPDATES), interval_checkpoint(tmp_path, UPDATES))


def test_resume_fp16_is_the_uninterrupted_fp16_run(runs, tiny_lm_corpus, tmp_path):
    """Resumed from the full checkpoint of update 2 (fp32 weights and Adam state), the same
    --fp16 configuration repeats the same arithmetic: losses and state at updates 3-4 are bit-identical."""
    uninterrupted, resumed_updates = runs["layers_fp16"], range(UPDATES // 2 + 1, UPDATES + 1)
    middle = interval_checkpoint(uninterrupted, UPDATES // 2)
    fairseq_train(lm_args(tiny_lm_corpus, tmp_path, *FP16_LAYERS, "--restore-file", middle))
    assert_same_losses(uninterrupted, tmp_path, resumed_updates, abs=0)
    for update in resumed_updates:
        assert_same_state(interval_checkpoint(uninterrupted, update), interval_checkpoint(tmp_path, update), atol=0, rtol=0)


def test_a_killed_rank_ends_the_sharded_run_which_then_resumes(runs, tiny_lm_corpus, tmp_path):
    """Two torchrun nodes; SIGKILL of node 1's process once node 0 logged update 2: node 0's next
    collective (here: gathering the full checkpoint) fails at once, its peer's connection gone; the
    same command resumes from checkpoint_last.pt (update 1 or 2) to a run bit-identical to the
    uninterrupted flat run."""
    kill_node_1_then_resume(lm_args(tiny_lm_corpus, tmp_path, *SHARDED), UPDATES)
    assert_same_losses(runs["flat"], tmp_path, range(1, UPDATES + 1), abs=0)
    assert_same_state(interval_checkpoint(runs["flat"], UPDATES), interval_checkpoint(tmp_path, UPDATES), atol=0, rtol=0)


ONE_PROCESS = ["--ddp-backend", "fully_sharded", "--update-freq", "2"]


def test_one_process_continues_the_two_process_run(runs, tiny_lm_corpus, tmp_path):
    """The flat 2-process run's full checkpoint of update 2, continued by one FSDP process with
    --update-freq 2 (the same global batch): the reference's losses, weights and Adam state. Before the
    fix, one FSDP process stopped at once: "torch.distributed is not yet initialized but process group is requested"."""
    middle = interval_checkpoint(runs["flat"], UPDATES // 2)
    fairseq_train(lm_args(tiny_lm_corpus, tmp_path, *ONE_PROCESS, "--restore-file", middle))
    assert_same_losses(runs["reference"], tmp_path, range(UPDATES // 2 + 1, UPDATES + 1), abs=1e-5)
    assert_same_state(interval_checkpoint(runs["reference"], UPDATES), interval_checkpoint(tmp_path, UPDATES))


def test_one_process_with_cpu_offload_trains_and_resumes(runs, tiny_lm_corpus, tmp_path):
    """--cpu-offload (fairscale's offload code, on CPU: copies unpinned, streams no-ops) for 2 updates,
    resumed to 4: the unsharded reference at every update."""
    offload = lambda updates: [*ONE_PROCESS, "--cpu-offload", "--max-update", updates]
    fairseq_train(lm_args(tiny_lm_corpus, tmp_path, *offload(UPDATES // 2)))
    assert "Loaded checkpoint" in fairseq_train(lm_args(tiny_lm_corpus, tmp_path, *offload(UPDATES))).stdout
    assert_same_losses(runs["reference"], tmp_path, range(1, UPDATES + 1), abs=1e-5)
    for update in range(1, UPDATES + 1):
        assert_same_state(interval_checkpoint(runs["reference"], update), interval_checkpoint(tmp_path, update))


def test_cpu_offload_without_fully_sharded_is_one_line(tiny_lm_corpus, tmp_path, monkeypatch):
    """In this process: the BadInput fairseq-train prints as its one line (tests/test_bad_input.py runs one for real)."""
    monkeypatch.setattr(sys, "argv", ["fairseq-train", *map(str, lm_args(tiny_lm_corpus, tmp_path, "--cpu-offload"))])
    message = "--cpu-offload offloads FSDP's shards: add --ddp-backend fully_sharded (one process or more)"
    with pytest.raises(BadInput, match=f"^{re.escape(message)}$"):
        train.cli_main()
    assert list(tmp_path.iterdir()) == []


def shard(checkpoint, rank: int):
    return checkpoint.with_name(f"{checkpoint.stem}-shard{rank}.pt")


def test_resume_from_shards_matches_uninterrupted_run(runs, tiny_lm_corpus, tmp_path):
    """Each rank resumes from its own shard (model and optimizer state) and writes the same shard."""
    uninterrupted = runs["layers_sharded_state"]
    assert fsdp_instances(shard(interval_checkpoint(uninterrupted, UPDATES), 1)) == 3
    middle = interval_checkpoint(uninterrupted, UPDATES // 2)
    sharded = [*SHARDED, "--checkpoint-activations", "--use-sharded-state"]
    fairseq_train(lm_args(tiny_lm_corpus, tmp_path, *sharded, "--restore-file", middle))
    for rank in (0, 1):
        assert_same_state(shard(interval_checkpoint(uninterrupted, UPDATES), rank), shard(interval_checkpoint(tmp_path, UPDATES), rank))


@pytest.fixture(scope="module")
def consolidated(runs, tmp_path_factory):
    """normformer-consolidate of the per-layer sharded run's last checkpoint (checkpoint_1_4-shard{0,1}.pt)."""
    output = tmp_path_factory.mktemp("consolidated") / "checkpoint_full.pt"
    sharded = interval_checkpoint(runs["layers_sharded_state"], UPDATES)
    result = run_cli(["normformer-consolidate", sharded, output])
    assert f"tensors of {sharded} written to {output}" in result.stdout
    return output


def test_consolidated_shards_hold_the_reference_weights(runs, consolidated):
    reference = load(interval_checkpoint(runs["reference"], UPDATES))["model"]
    weights = load(consolidated)["model"]
    assert weights.keys() == reference.keys()
    for name, weight in reference.items():
        if not name.endswith(ZERO_GRADIENT):
            torch.testing.assert_close(weights[name], weight, atol=1e-5, rtol=0, msg=name)


def eval_lm_loss(data_bin, checkpoint) -> float:
    result = run_cli(["fairseq-eval-lm", data_bin, "--path", checkpoint, "--user-dir", USER_DIR, "--cpu",
                      "--gen-subset", "valid", "--batch-size", "8", "--tokens-per-sample", "32", "--num-workers", "0"])  # fmt: skip
    return float(re.search(r"Loss \(base 2\): ([\d.]+)", result.stdout + result.stderr).group(1))


def test_consolidated_checkpoint_evaluates_and_exports_as_the_full_one(runs, consolidated, tiny_lm_corpus, tmp_path):
    """fairseq-eval-lm prints the same loss for the consolidated sharded run and the full reference, and
    normformer-export-hf writes the same weights from both."""
    full = interval_checkpoint(runs["reference"], UPDATES)
    loss = eval_lm_loss(tiny_lm_corpus.data_bin, full)
    assert eval_lm_loss(tiny_lm_corpus.data_bin, consolidated) == pytest.approx(loss, abs=1e-4)
    for name, checkpoint in (("full", full), ("consolidated", consolidated)):
        export_hf.main([str(checkpoint), str(tmp_path / name)])
    exported = [load_file(tmp_path / name / "model.safetensors") for name in ("full", "consolidated")]
    assert exported[0].keys() == exported[1].keys()
    for name, weight in exported[0].items():
        torch.testing.assert_close(exported[1][name], weight, atol=1e-5, rtol=0, msg=name)


def test_consolidate_names_a_missing_shard(runs, tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint_last.pt"
    shutil.copy(shard(interval_checkpoint(runs["layers_sharded_state"], UPDATES), 1), shard(checkpoint, 1))
    with pytest.raises(SystemExit, match=r"shard 0 of .*checkpoint_last.pt is missing"):
        consolidate.main([str(checkpoint), str(tmp_path / "full.pt")])
    assert not (tmp_path / "full.pt").exists()


def test_consolidate_given_a_shard_names_the_checkpoint_to_give(tmp_path):
    shard_0 = tmp_path / "checkpoint_last-shard0.pt"
    shard_0.touch()
    hint = (f"no shards checkpoint_last-shard0-shard<N>.pt next to {shard_0}: "
            f"name the checkpoint without -shard<N>, {tmp_path / 'checkpoint_last.pt'}")  # fmt: skip
    with pytest.raises(SystemExit, match=re.escape(f"normformer-consolidate: error: {hint}")):
        consolidate.main([str(shard_0), str(tmp_path / "full.pt")])


def test_memory_efficient_fp16_is_refused_with_fully_sharded(tiny_lm_corpus, tmp_path, monkeypatch):
    args = lm_args(tiny_lm_corpus, tmp_path, *SHARDED, "--memory-efficient-fp16")
    monkeypatch.setattr(sys, "argv", ["fairseq-train", *map(str, args)])
    with pytest.raises(ValueError, match="--memory-efficient-fp16 does not work with --ddp-backend fully_sharded"):
        train.cli_main()
    assert list(tmp_path.iterdir()) == []


def test_fully_sharded_without_fairscale_names_the_install(tiny_lm_corpus, tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fairscale" else find_spec(name, *a))
    monkeypatch.setattr(sys, "argv", ["fairseq-train", *map(str, lm_args(tiny_lm_corpus, tmp_path, *SHARDED))])
    with pytest.raises(ValueError, match=r"needs fairscale: pip install --no-deps -r requirements/fsdp.txt"):
        train.cli_main()
