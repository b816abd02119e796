"""The gradient-norm recorder against gradients computed independently, through fairseq's Trainer."""
import copy
import json

import pytest
import torch
from fairseq import options, tasks
from fairseq.trainer import Trainer

from fairseq_normformer.analysis.grad_curves import grad_ratios, read_grad_norms, window_means
from fairseq_normformer.instrumentation.grad_norms import mean_abs_grads
from fairseq_normformer.instrumentation.param_groups import param_group
from tests.conftest import USER_DIR, fairseq_config

TINY_NORMFORMER = ["--arch", "normformer_lm", "--scale-attn", "--scale-fc", "--scale-heads", "--decoder-layers", "2",
                   "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "48", "--decoder-attention-heads", "4",
                   "--dropout", "0", "--tokens-per-sample", "32", "--sample-break-mode", "none"]  # fmt: skip


def test_mean_abs_grads_is_the_average_l1_norm_times_the_pending_scale():
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7))
    model(torch.randn(3, 5)).pow(2).sum().backward()
    norms = mean_abs_grads(model.named_parameters(), grad_scale=0.25)
    for name, p in model.named_parameters():
        assert norms[name] == pytest.approx(0.25 * p.grad.abs().sum().item() / p.numel(), rel=1e-6)


def train_one_update(data_bin, tmp_path, extra):
    """One update of fairseq's real Trainer with the recorder on; returns (recorded norms, fp32 reference
    gradients of the mean token loss computed on a copy of the initial model, the reference's global norm)."""
    grad_file = tmp_path / "grad_norms.jsonl"
    argv = [str(data_bin), "--user-dir", str(USER_DIR), "--task", "language_modeling_analysis", *TINY_NORMFORMER,
            "--optimizer", "adam", "--lr", "1e-3", "--batch-size", "4", "--cpu", "--num-workers", "0",
            "--grad-norm-interval", "1", "--grad-norm-file", str(grad_file), *extra]  # fmt: skip
    cfg = fairseq_config(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    reference = copy.deepcopy(model).float()
    trainer = Trainer(cfg, task, model, criterion)
    batches = task.get_batch_iterator(task.dataset("train"), max_sentences=4, seed=1)
    sample = next(batches.next_epoch_itr(shuffle=False))
    trainer.train_step([sample])

    loss, sample_size, _ = criterion(reference, sample)
    (loss / sample_size).backward()
    grads = {param_group(n).key: p.grad for n, p in reference.named_parameters()}
    total_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads.values())).item()
    [record] = read_grad_norms(grad_file)
    assert record["update"] == 1
    return record["grad_l1"], {k: g.abs().mean().item() for k, g in grads.items()}, total_norm


@pytest.mark.parametrize(
    "extra, rel",
    [
        ([], 1e-4),
        (["--clip-norm", "1e-3"], 1e-4),  # clipped: scaled by clip / total norm
        (["--memory-efficient-fp16", "--fp16-init-scale", "128"], 2e-2),  # stored grads carry the loss scale
    ],
    ids=["fp32", "clip-norm", "memory-efficient-fp16"],
)
def test_recorded_norms_are_the_gradients_the_optimizer_applies(tiny_lm_corpus, tmp_path, extra, rel):
    recorded, reference, total_norm = train_one_update(tiny_lm_corpus.data_bin, tmp_path, extra)
    clip = min(1.0, 1e-3 / total_norm) if "--clip-norm" in extra else 1.0
    assert set(recorded) == set(reference)
    for key, value in reference.items():
        if key.endswith("k_proj.bias"):  # zero but for rounding: it shifts all logits of a query alike
            continue
        assert recorded[key] == pytest.approx(clip * value, rel=rel, abs=1e-8), key


def test_grad_norm_file_keeps_the_last_record_of_an_update_and_rejects_garbage(tmp_path):
    path = tmp_path / "g.jsonl"
    records = [{"update": 2, "grad_l1": {"a": 1.0}}, {"update": 4, "grad_l1": {"a": 2.0}},
               {"update": 4, "grad_l1": {"a": 3.0}}]  # fmt: skip  (a resumed run re-recorded update 4)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert read_grad_norms(path) == [records[0], records[2]]
    path.write_text('{"update": 2, "grad_l1": {}}\nnot json\n')
    with pytest.raises(ValueError, match="g.jsonl:2"):
        read_grad_norms(path)


def test_window_means_and_ratios_follow_their_definition():
    def record(update, fc2, fc1):
        return {"update": update, "grad_l1": {"layers.0.fc2.weight": fc2, "layers.1.fc2.weight": 2 * fc2,
                                              "layers.0.fc1.weight": fc1, "decoder.embed_tokens.weight": 5.0}}  # fmt: skip

    baseline = [record(u, fc2=1.0 * u, fc1=4.0) for u in (1, 2, 3, 4)]
    candidate = [record(u, fc2=3.0 * u, fc1=1.0) for u in (1, 2, 3, 4)]
    assert window_means(baseline, 2, 3)["layers.0.fc2.weight"] == pytest.approx(2.5)
    ratios = grad_ratios(candidate, baseline, 2, 3)
    # mean over updates 2-3 of 3u / mean of u = 3 in each layer; fc1 1/4; nothing outside the layers
    assert ratios == {"fc1.weight": {0: pytest.approx(0.25)}, "fc2.weight": {0: pytest.approx(3.0), 1: pytest.approx(3.0)}}
    with pytest.raises(ValueError, match="between updates 7 and 9"):
        window_means(baseline, 7, 9)
