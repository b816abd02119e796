"""Mixed precision on CPU: --bf16 trains a bfloat16 model, the fp16 paths survive gradient
overflow (dynamic loss scaling), and LayerNorm keeps its statistics in fp32."""
import math

import pytest
import torch
import torch.nn.functional as F

from fairseq_normformer.modules.layer_norm import LayerNorm, resolve_layernorm_impl

from .distributed.fairseq_runs import logged_updates, model_weights, tiny_lm_args
from .distributed.fairseq_runs import train_in_process as train  # these tests are about the numbers, not the process

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)


def is_bfloat16(weight: torch.Tensor) -> bool:
    return torch.equal(weight.to(torch.bfloat16).float(), weight.float())


def test_bf16_on_cpu_trains_a_bfloat16_model_close_to_fp32(tiny_lm_corpus, tmp_path):
    """fairseq saves weights upcast to fp32; a bf16 model's are all exactly bfloat16 numbers."""
    runs = {}
    for name, switches in {"fp32": [], "bf16": ["--bf16"]}.items():
        args = tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path / name, "--dropout", "0", "--max-update", "3")
        runs[name] = logged_updates(train(args + switches).stdout)
    assert all(is_bfloat16(w) for w in model_weights(tmp_path / "bf16" / "checkpoint_last.pt").values())
    assert not all(is_bfloat16(w) for w in model_weights(tmp_path / "fp32" / "checkpoint_last.pt").values())
    assert sorted(runs["bf16"]) == sorted(runs["fp32"]) == [1, 2, 3]
    for update, stats in runs["bf16"].items():  # bfloat16 keeps ~3 significant digits
        assert float(stats["loss"]) == pytest.approx(float(runs["fp32"][update]["loss"]), abs=0.05)


@pytest.mark.parametrize("fp16", ["--fp16", "--memory-efficient-fp16"])
def test_fp16_from_a_tiny_loss_scale_recovers_from_overflow(fp16, tiny_lm_corpus, tmp_path):
    """The loss scale starts at 1 and doubles after every update until the gradients overflow
    fp16; each overflow must skip that update and halve the scale, and training go on."""
    updates = 24
    args = tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, "--max-update", updates, "--no-save")
    log = train(args + [fp16, "--fp16-init-scale", "1", "--fp16-scale-window", "1"]).stdout
    overflow_at = log.index("gradient overflow detected, ignoring gradient")
    logged = logged_updates(log)
    assert sorted(logged) == list(range(1, updates + 1))
    assert all(math.isfinite(float(stats["loss"])) for stats in logged.values())
    assert float(logged[1]["loss_scale"]) <= 2
    assert any(log.index(f'"num_updates": "{u}"') > overflow_at for u in logged), "no update after the overflow"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_statistics_are_fp32(dtype):
    """Low-precision inputs with a large mean: the output must match LayerNorm computed in fp32
    from the same inputs (sums of 1024 fp16 values near 8 would lose the variance entirely)."""
    torch.manual_seed(0)
    x = (8 + 0.05 * torch.randn(4, 1024)).to(dtype)
    norm = LayerNorm(1024, resolve_layernorm_impl("torch"))
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.1, 0.1)
        reference = F.layer_norm(x.float(), (1024,), norm.weight, norm.bias, norm.eps)
        out = norm.to(dtype)(x)
    assert out.dtype == dtype
    atol = 0.02 if dtype == torch.bfloat16 else 4e-3  # a few units of the output's last place
    torch.testing.assert_close(out.float(), reference, atol=atol, rtol=0.01)
