"""fairseq-train with the measurement options, then normformer-analyze on what it wrote."""
import json
import math
import re
import struct

import pytest
import torch
from tensorboardX.proto import event_pb2

from fairseq_normformer.analysis.diagnostics import read_diagnostics
from fairseq_normformer.analysis.grad_curves import read_grad_norms
from fairseq_normformer.instrumentation.grad_norms import METRIC_PREFIX
from fairseq_normformer.runs.lr_stability import stability_command
from fairseq_normformer.cli.analyze import main as analyze
from tests.conftest import USER_DIR, run_cli

TINY = ["--arch", "normformer_lm", "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim",
        "48", "--decoder-attention-heads", "4", "--tokens-per-sample", "32", "--sample-break-mode", "none",
        "--batch-size", "4", "--optimizer", "adam", "--cpu", "--num-workers", "0", "--seed", "3"]  # fmt: skip
NORMFORMER = ["--scale-attn", "--scale-fc", "--scale-heads"]


@pytest.fixture(scope="module")
def runs(tiny_lm_corpus, tmp_path_factory):
    """A baseline and a NormFormer: 6 updates, gradient norms and scale diagnostics every 2, validation every 3."""
    out = tmp_path_factory.mktemp("analysis_runs")
    for name, switches in (("baseline", []), ("normformer", NORMFORMER)):
        args = ["fairseq-train", tiny_lm_corpus.data_bin, "--user-dir", USER_DIR, *TINY, *switches,
                "--task", "language_modeling_analysis", "--grad-norm-interval", "2",
                "--grad-norm-file", out / f"{name}.jsonl", "--tensorboard-logdir", out / f"tb_{name}",
                "--diagnostics-interval", "2", "--diagnostics-file", out / f"{name}_diagnostics.jsonl",
                "--lr", "3e-3", "--max-update", "6", "--validate-interval-updates", "3", "--log-interval", "1",
                "--log-format", "json", "--save-dir", out / f"ckpt_{name}", "--no-epoch-checkpoints"]  # fmt: skip
        (out / f"{name}.log").write_text(run_cli(args).stdout)
    return out


def logged_stats(log_path):
    return [json.loads(line.split(" | ", 3)[3]) for line in log_path.read_text().splitlines() if "| train_inner |" in line]


def tensorboard_tags(logdir):
    """Scalar tags in tensorboard event files (TFRecord: length, crc, Event, crc)."""
    tags = set()
    for path in logdir.rglob("events.out.tfevents.*"):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            tags.update(value.tag for value in event.summary.value)
            offset += 12 + length + 4
    return tags


def test_grad_norms_reach_the_file_the_training_log_and_tensorboard(runs):
    records = read_grad_norms(runs / "normformer.jsonl")
    assert [r["update"] for r in records] == [2, 4, 6]
    logged = {int(s["num_updates"]): s for s in logged_stats(runs / "normformer.log")}
    for record in records:
        assert len(record["grad_l1"]) > 20
        for key, value in record["grad_l1"].items():
            assert float(logged[record["update"]][METRIC_PREFIX + key]) == pytest.approx(value, rel=1e-5)
    assert not any(k.startswith(METRIC_PREFIX) for k in logged[3])  # not recorded at update 3
    assert METRIC_PREFIX + "layers.1.fc2.weight" in tensorboard_tags(runs / "tb_normformer")


def test_diagnostics_reach_the_file_the_training_log_and_tensorboard_and_plot(runs, tmp_path):
    records = read_diagnostics(runs / "normformer_diagnostics.jsonl")
    assert [r["update"] for r in records] == [2, 4, 6]
    logged = {int(s["num_updates"]): s for s in logged_stats(runs / "normformer.log")}
    for record in records:
        assert set(record["attn_logit"]) == set(record["layer_rms"]) == {"layers.0", "layers.1"}
        stats = logged[record["update"]]
        assert float(stats["abs_log_z"]) == pytest.approx(record["abs_log_z"], rel=1e-5)
        for layer in ("layers.0", "layers.1"):
            for quantity in ("attn_logit", "layer_rms"):
                assert float(stats[f"{quantity}/{layer}"]) == pytest.approx(record[quantity][layer], rel=1e-5)
    assert not any(k.startswith(("attn_logit", "layer_rms", "abs_log_z")) for k in logged[3])  # not at update 3
    assert {"attn_logit/layers.1", "layer_rms/layers.0", "abs_log_z"} <= tensorboard_tags(runs / "tb_normformer")

    analyze(["diagnostics", "--run", f"Baseline={runs / 'baseline_diagnostics.jsonl'}",
             "--run", f"NormFormer={runs / 'normformer_diagnostics.jsonl'}", "--out-dir", str(tmp_path)])  # fmt: skip
    assert (tmp_path / "diagnostics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [line.split("|")[1:-1] for line in (tmp_path / "diagnostics.md").read_text().splitlines()[4:]]
    assert [(r[0].strip(), int(r[1]), r[2].strip()) for r in rows] == [
        (label, 6, where) for label in ("Baseline", "NormFormer") for where in ("layers.0", "layers.1", "output")]
    assert float(rows[4][3]) == pytest.approx(records[-1]["attn_logit"]["layers.1"], rel=1e-3)
    assert float(rows[5][5]) == pytest.approx(records[-1]["abs_log_z"], rel=1e-3)


def test_figures_and_tables_from_the_runs(runs, tmp_path):
    base, nf = runs / "baseline.jsonl", runs / "normformer.jsonl"
    analyze(["grad-curves", "--run", f"Baseline={base}", "--run", f"NormFormer={nf}", "--out-dir", str(tmp_path)])
    analyze(["grad-ratio", "--baseline", f"Baseline={base}", "--run", f"NormFormer={nf}", "--window", "2:6",
             "--out-dir", str(tmp_path)])  # fmt: skip
    analyze(["time-to-target", "--baseline", str(runs / "baseline.log"), "--candidate", str(runs / "normformer.log"),
             "--out-dir", str(tmp_path)])  # fmt: skip
    for png in ("fig3_grad_norms.png", "fig5_grad_ratio.png", "fig2_time_to_target.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Fig. 5's table: the mean over updates 2-6 of NormFormer's fc2 gradient over the baseline's, layer 1
    mean = lambda path: sum(r["grad_l1"]["layers.1.fc2.weight"] for r in read_grad_norms(path)) / 3  # noqa: E731
    row = next(line for line in (tmp_path / "fig5_grad_ratio.md").read_text().splitlines() if "| fc2.weight |" in line)
    assert float(row.split("|")[3]) == pytest.approx(mean(nf) / mean(base), rel=1e-3)

    # Fig. 2's numbers against the validation lines of the logs
    def valid_ppl(name):
        lines = [json.loads(line.split(" | ", 3)[3]) for line in (runs / f"{name}.log").read_text().splitlines()
                 if "| valid |" in line]  # fmt: skip
        return [(int(v["valid_num_updates"]), float(v["valid_ppl"])) for v in lines]

    target = valid_ppl("baseline")[-1][1]
    hit = next((u for u, ppl in valid_ppl("normformer") if ppl <= target), None)
    (result,) = json.loads((tmp_path / "fig2_time_to_target.json").read_text())["seeds"]
    assert result["target_ppl"] == target and result["hit_update"] == hit and result["baseline_updates"] == 6


def test_ppl_table_rows(runs, tmp_path):
    analyze(["ppl-table", "--run", f"Baseline={runs / 'baseline.log'}", "--run", f"NormFormer={runs / 'normformer.log'}",
             "--out", str(tmp_path / "t.md"), "--title", "Tiny"])  # fmt: skip
    rows = [line.split("|")[1:-1] for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| ")]
    params = {name: int(re.search(r"num\. shared model params: ([\d,]+)", (runs / f"{name}.log").read_text())
                        .group(1).replace(",", "")) for name in ("baseline", "normformer")}  # fmt: skip
    assert [r[0].strip() for r in rows[1:]] == ["Baseline", "NormFormer"]
    # NormFormer adds per layer an LN of d and of the FFN width (weight and bias) and one γ per head
    assert params["normformer"] - params["baseline"] == 2 * (2 * 32 + 2 * 48 + 4)
    assert int(rows[2][1].replace(",", "")) == params["normformer"]


def test_gamma_of_a_checkpoint(runs, tmp_path):
    checkpoint = runs / "ckpt_normformer" / "checkpoint_last.pt"
    analyze(["gamma", str(checkpoint), "--out-dir", str(tmp_path)])
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    table = (tmp_path / "fig4_gamma.md").read_text()
    for label, name in (("Post-Attn LN γ", "attn_ln.weight"), ("FFN LN γ", "ffn_layernorm.weight"),
                        ("HeadScale γ", "self_attn.head_scale")):  # fmt: skip
        row = next(line for line in table.splitlines() if line.startswith(f"| {label} | 1 |"))
        gamma = state[f"decoder.layers.1.{name}"]
        assert int(row.split("|")[3]) == gamma.numel()
        assert float(row.split("|")[4]) == pytest.approx(gamma.mean().item(), rel=1e-3)
    assert (tmp_path / "fig4_gamma.png").exists()


def test_gamma_of_a_baseline_is_a_clear_error(runs):
    with pytest.raises(SystemExit, match="it is a baseline model"):
        analyze(["gamma", str(runs / "ckpt_baseline" / "checkpoint_last.pt"), "--out-dir", str(runs / "g")])


@pytest.mark.slow
def test_lr_stability_run_stops_at_the_first_overflow(tiny_lm_corpus, tmp_path):
    """Through the console script, which runs fairseq-train."""
    peak, warmup = 5.0, 40
    printed = run_cli(["normformer-analyze", "lr-stability", tiny_lm_corpus.data_bin, "--peak-lr", peak,
                       "--warmup-updates", warmup, "--threshold", 200, "--out-dir", tmp_path / "run", "--", *TINY,
                       "--disable-validation", "--no-save"]).stdout  # fmt: skip
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    log = (tmp_path / "run" / "train.log").read_text()
    logged_updates = [int(json.loads(line.split(" | ", 3)[3])["num_updates"])
                      for line in log.splitlines() if "| train_inner |" in line]  # fmt: skip
    assert result["outcome"] == "diverged" and "ActivationOverflowError" in log
    assert result["last_good_update"] == (logged_updates[-1] if logged_updates else 0)
    assert result["first_overflow"]["update"] == result["last_good_update"] + 1
    # fairseq's polynomial_decay warmup: update u + 1 runs at peak * u / warmup (update 1 at peak / warmup)
    assert result["lr_reached"] == pytest.approx(peak * max(1, result["last_good_update"]) / warmup, rel=1e-4)
    assert result["first_overflow"]["max_abs"] > 200 or math.isnan(result["first_overflow"]["max_abs"])
    assert f"diverged after update {result['last_good_update']}" in printed


def test_lr_stability_rejects_the_flags_it_sets(tmp_path):
    with pytest.raises(ValueError, match="sets --lr itself"):
        stability_command("data", tmp_path, 1.0, 10, 65504.0, ["--lr", "0.1"])
