"""memory_plan.py against what tiny models actually hold: parameter tensors of the built model,
the bytes autograd saves for backward (torch's saved-tensor hooks), and the parameter, gradient and
optimizer-state bytes per rank of fairseq's Trainer in a real 2-process gloo run (DDP, ZeRO-1)."""
import copy
import json
import os

import pytest
import torch
from fairseq import options, tasks
from fairseq.distributed import fsdp_enable_wrap, fsdp_wrap
from fairseq.distributed import utils as distributed_utils
from fairseq.trainer import Trainer

from fairseq_normformer import memory_plan, paper
from fairseq_normformer.memory_plan import ModelShape

from .conftest import REPO_ROOT, USER_DIR, fairseq_config, run_cli
from .models.lm_builders import normformer_lm, tiny_dictionary

L, D, F, H, T, B = 2, 64, 256, 4, 32, 3
SHAPE_FLAGS = ["--decoder-layers", str(L), "--decoder-embed-dim", str(D), "--decoder-ffn-embed-dim", str(F),
               "--decoder-attention-heads", str(H), "--tokens-per-sample", str(T)]  # fmt: skip
VOCAB = 1000


def tiny_shape(normformer: bool, vocab: int = VOCAB) -> ModelShape:
    return ModelShape(L, D, F, H, vocab, normformer=normformer)


def build(normformer: bool, *flags):
    arch = "normformer_lm_gpt3_small" if normformer else "preln_lm_gpt3_small"
    return normformer_lm(tiny_dictionary(VOCAB - 4), arch, SHAPE_FLAGS + list(flags))


@pytest.mark.parametrize("normformer", [False, True])
def test_parameter_tensors_are_the_models_in_order(normformer):
    model = build(normformer)
    assert memory_plan.parameter_tensors(tiny_shape(normformer)) == [p.numel() for p in model.parameters()]


def test_gpt3_presets_have_the_papers_sizes():
    millions = {size: sum(memory_plan.parameter_tensors(ModelShape.gpt3(f"preln_lm_{size}"))) / 1e6
                for size in ("gpt3_small", "gpt3_medium", "gpt3_xl", "gpt3_2_7")}  # fmt: skip
    # GPT-3's Table 2.1: 125M, 350M, 1.3B, 2.7B (it counts the tied embedding once, as here)
    assert [round(m, -1) for m in millions.values()] == [120, 350, 1310, 2650]


def saved_activation_bytes(model) -> int:
    """Bytes of the distinct storages autograd keeps for backward (parameters excluded) after one
    forward pass and fairseq's cross-entropy (fp32 log-softmax)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def keep(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    torch.manual_seed(0)
    tokens = torch.randint(4, VOCAB, (B, T))
    model.train()
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        logits = model(tokens)[0]
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        torch.nn.functional.nll_loss(log_probs.view(-1, VOCAB), tokens.view(-1))
    return sum(storages.values())


@pytest.mark.parametrize("normformer", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_activation_formula_is_what_autograd_keeps(normformer, dropout):
    model = build(normformer, "--dropout", str(dropout), "--attention-dropout", "0")
    # on CPU a dropout mask has the activations' dtype (fp32 here); on CUDA it is a bool
    expected = memory_plan.activation_bytes(tiny_shape(normformer), B, T, 4, dropout_mask=4 if dropout else 0)
    assert saved_activation_bytes(model) == pytest.approx(expected, rel=0.01)


def test_checkpointed_layers_keep_only_their_input():
    model = build(True, "--dropout", "0", "--attention-dropout", "0", "--checkpoint-activations")
    shape = tiny_shape(True)
    expected = memory_plan.activation_bytes(shape, B, T, 4, checkpoint_activations=True)
    one_layer = B * T * memory_plan.layer_activation_bytes(shape, 4, 0) + memory_plan.layer_constant_bytes(shape, 4)
    # forward keeps the layers' inputs; backward adds one recomputed layer at a time
    assert saved_activation_bytes(model) + one_layer == pytest.approx(expected, rel=0.02)


# -- per rank, in a real 2-process run of fairseq's Trainer ----------------------------------------
VARIANTS = {  # name: (precision, backend); every precision and both backends, one run
    "fp32-c10d": ("fp32", "c10d"), "fp16-zero-os": ("fp16", "zero-os"),
    "memory-efficient-fp16-c10d": ("memory-efficient-fp16", "c10d"),
    "memory-efficient-fp16-zero-os": ("memory-efficient-fp16", "zero-os"),
    "fp32-fsdp": ("fp32", "fsdp"), "fp16-fsdp": ("fp16", "fsdp"),
}  # fmt: skip
DDP_VARIANTS = [name for name, (_, backend) in VARIANTS.items() if backend != "fsdp"]


def variant_cfg(cfg, precision: str, backend: str):
    cfg = copy.deepcopy(cfg)
    cfg.common.fp16 = precision != "fp32"
    cfg.common.memory_efficient_fp16 = precision == "memory-efficient-fp16"
    cfg.common.fp16_no_flatten_grads = True  # as on CPU (fixes/cpu_training.py); ZeRO needs it with --fp16
    cfg.distributed_training.zero_sharding = "os" if backend == "zero-os" else "none"
    cfg.distributed_training.ddp_backend = "fully_sharded" if backend == "fsdp" else "pytorch_ddp"
    return cfg


def tensor_bytes(tensors) -> int:
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def optimizer_tensors(optimizer) -> list:
    """fairseq's optimizer wrapper: the fp32 master weights and gradients, and the Adam state of the
    torch optimizer (fairscale's OSS: of this rank's partition)."""
    masters = getattr(optimizer, "fp32_params", [])  # a list with --fp16-no-flatten-grads, as on CPU
    inner = optimizer.optimizer
    state = (inner.optim if hasattr(inner, "optim") else inner).state
    moments = [v for s in state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1]
    return masters + [m.grad for m in masters if m.grad is not None] + moments


def build_model(task, cfg):
    """As fairseq_cli/train.py: with fully_sharded, each unit wrapped while the model is built."""
    if cfg.distributed_training.ddp_backend != "fully_sharded":
        return task.build_model(cfg.model)
    with fsdp_enable_wrap(cfg.distributed_training):
        return fsdp_wrap(task.build_model(cfg.model))


def measure_rank(cfg, out_dir, variants):
    """Every variant in turn: build the model, take one training step, count bytes on this rank."""
    task = tasks.setup_task(cfg.task)
    rank = distributed_utils.get_data_parallel_rank()
    measured = {}
    for name in variants:
        variant = variant_cfg(cfg, *VARIANTS[name])
        model, criterion = build_model(task, variant), task.build_criterion(variant.criterion)
        trainer = Trainer(variant, task, model, criterion)
        batches = trainer.get_train_iterator(epoch=1).next_epoch_itr(shuffle=False)
        trainer.train_step([next(batches)])
        params = list(trainer.model.parameters())
        measured[name] = {"weights": tensor_bytes(params), "gradients": tensor_bytes(p.grad for p in params),
                          "optimizer": tensor_bytes(optimizer_tensors(trainer.optimizer)),
                          "vocab": len(task.source_dictionary)}  # fmt: skip
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(measured, f)


def measure_two_ranks(data_bin, out, variants) -> list:
    args = [str(data_bin), "--user-dir", str(USER_DIR), "--task", "language_modeling",
            "--arch", "normformer_lm_gpt3_small", *SHAPE_FLAGS, "--batch-size", "2", "--optimizer", "adam",
            "--lr", "1e-3", "--cpu", "--num-workers", "0", "--distributed-world-size", "2",
            "--distributed-backend", "gloo", "--save-dir", str(out), "--no-save"]  # fmt: skip
    cfg = fairseq_config(options.parse_args_and_arch(options.get_training_parser(), args))
    distributed_utils.call_main(cfg, measure_rank, out_dir=str(out), variants=variants)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def measured_ddp(tiny_lm_corpus, tmp_path_factory):
    return measure_two_ranks(tiny_lm_corpus.data_bin, tmp_path_factory.mktemp("memory"), DDP_VARIANTS)


@pytest.fixture(scope="module")
def measured_fsdp(tiny_lm_corpus, tmp_path_factory):
    fsdp = [name for name in VARIANTS if name not in DDP_VARIANTS]
    return measure_two_ranks(tiny_lm_corpus.data_bin, tmp_path_factory.mktemp("memory"), fsdp)


def assert_plan_matches(measured_per_rank, variant):
    precision, backend = VARIANTS[variant]
    vocab = measured_per_rank[0][variant]["vocab"]
    planned = memory_plan.state_bytes(tiny_shape(True, vocab), precision, backend, world_size=2)
    for kind in ("weights", "gradients", "optimizer"):
        per_rank = [m[variant][kind] for m in measured_per_rank]
        # the plan gives the larger rank's share
        assert max(per_rank) == pytest.approx(planned[kind], rel=0.10), kind
    if backend != "c10d":  # each rank holds the moments of its partition only
        replicated = memory_plan.state_bytes(tiny_shape(True, vocab), precision, "c10d", world_size=2)
        assert max(m[variant]["optimizer"] for m in measured_per_rank) < replicated["optimizer"] * 0.8


@pytest.mark.parametrize("variant", DDP_VARIANTS)
@pytest.mark.slow
def test_per_rank_bytes_match_a_real_two_process_run(measured_ddp, variant):
    assert_plan_matches(measured_ddp, variant)


@pytest.mark.parametrize("variant", [name for name in VARIANTS if name not in DDP_VARIANTS])
@pytest.mark.slow
def test_fsdp_halves_the_bytes_per_rank(measured_fsdp, variant):
    assert_plan_matches(measured_fsdp, variant)


def test_the_cli_prints_the_plan_and_the_arguments_it_picks():
    """(Refusing a plan that cannot fit: tests/distributed/test_launch_scripts.py, through the scripts.)"""
    result = run_cli(["normformer-paper-settings", "--memory", "--size", "2.7B", "--model", "normformer",
                      "--world-size", "8", "--gpu-memory", "16", "--format", "shell"])  # fmt: skip
    assert result.stdout == "MEMORY_ARGS=(--ddp-backend fully_sharded --checkpoint-activations)\n"
    planned = memory_plan.plan("normformer_lm_gpt3_2_7", "memory-efficient-fp16", "fsdp", 8, 4, 2048, True)
    assert f"{planned.total / 2**30:.2f} GiB" in result.stderr  # the total, printed for the log
    assert "fits: V100 16GB yes" in result.stderr


def test_the_pages_memory_table_is_what_the_cli_prints(capsys):
    paper.main(["--memory-table"])
    page = (REPO_ROOT / "docs" / "distributed.md").read_text()
    table = page.split("<!-- begin memory-table -->\n")[1].split("<!-- end memory-table -->")[0]
    assert table == capsys.readouterr().out
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == [f"| {size}" for size in paper.SIZES]


def test_every_size_of_the_help_has_a_memory_plan(capsys):
    (sizes,) = [a.choices for a in paper.get_parser()._actions if a.dest == "size"]
    for size in sizes:
        paper.main(["--memory", "--size", size, "--model", "normformer"])
        preset = f"normformer_lm_{paper.SIZES.get(size, size)}"
        assert capsys.readouterr().out.startswith(f"memory per GPU: {preset} "), size


def test_one_gpu_has_no_ddp_buckets_and_the_plan_lists_the_h100():
    """Issue 53: 0.23 GiB of DDP buckets on one GPU (fairseq wraps no DDP there), "1 GPUs", no H100."""
    params = sum(memory_plan.parameter_tensors(memory_plan.ModelShape.gpt3("normformer_lm_gpt3_small")))
    for world_size, buckets in ((1, 0), (2, 2 * params)):  # fp16 gradients, one more copy under DDP
        p = memory_plan.plan("normformer_lm_gpt3_small", "memory-efficient-fp16", "c10d", world_size, 16, 2048)
        assert p.bytes["ddp_buckets"] == buckets
    result = run_cli(["normformer-paper-settings", "--memory", "--size", "125M", "--model", "normformer",
                      "--world-size", "1"])  # fmt: skip
    assert ", c10d, 1 GPU, --batch-size 16 x 2048 tokens" in result.stdout
    assert "  ddp_buckets       0.00 GiB" in result.stdout and ", H100 80GB yes" in result.stdout
