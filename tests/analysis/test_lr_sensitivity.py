"""normformer-analyze lr-sensitivity (analysis/lr_sensitivity.py) against Wortsman et al. 2023's formula written out
on hand-made numbers, and on a hand-made sweep of two widths (its manifests written by normformer-sweep --dry-run of
a spec with `each_size`, its logs and diagnostics files by hand): the summary, the losses by LR and the trend
across widths. The same command on a grid that trained is in tests/runs/test_sweep.py."""
import json

import pytest
import yaml

from fairseq_normformer.analysis.lr_sensitivity import best_loss, capped, largest_stable_lr, lr_sensitivity, read_study
from tests.conftest import run_cli

L0 = 10.0
FINALS = {"1e-4": 6.0, "1e-3": 4.0, "1e-2": 5.0, "3e-2": 12.0, "1e-1": None}  # 3e-2 ends above l0, 1e-1 diverged


def test_the_sensitivity_is_the_mean_excess_over_the_best_each_loss_capped_at_the_initial_loss():
    # S = mean over eta of min(l(eta), l0) - min_eta l(eta): (6-4, 4-4, 5-4, 10-4, 10-4) / 5
    assert lr_sensitivity(FINALS, L0) == pytest.approx((2 + 0 + 1 + 6 + 6) / 5)
    assert best_loss(FINALS, L0) == (4.0, "1e-3") and largest_stable_lr(FINALS, L0) == "1e-2"
    assert [capped(v, L0) for v in (3.0, 12.0, None, float("nan"), float("inf"))] == [3.0, L0, L0, L0, L0]
    flat = {"1e-3": 4.0, "1e-2": 4.0}
    assert lr_sensitivity(flat, L0) == 0.0 and largest_stable_lr(flat, L0) == "1e-2"  # numeric, not text order
    assert lr_sensitivity({"1e-3": None, "1e-2": 11.0}, L0) is None and best_loss({"1e-3": None}, L0) is None
    assert largest_stable_lr({"1e-3": None, "1e-2": 11.0}, L0) is None


DONE = "2026-01-01 10:00:09 | INFO | fairseq_cli.train | done training in 6.0 seconds\n"
DIVERGED = "FloatingPointError: gradients are Nan/Inf\n"


def write_run(run_dir, initial, final, diagnostics=None):
    """A fairseq-train log (--log-format json) with update 1's loss, a validation at update 3 and how it ended
    (``final`` None: diverged at update 2); a diagnostics file of updates 2 and 3 ({quantity: value}, layers 0, 1):
    the logit and the RMS grow to their value, |log Z| is twice its value at update 2 (an excursion that settles)."""
    run_dir.mkdir(parents=True)
    lines = [f'2026-01-01 10:00:01 | INFO | train_inner | {{"epoch": 1, "loss": "{initial}", "num_updates": "1"}}\n']
    lines += [DIVERGED] if final is None else [
        f'2026-01-01 10:00:05 | INFO | valid | {{"epoch": 1, "valid_loss": "{final}", "valid_num_updates": "3"}}\n', DONE]
    (run_dir / "train.log").write_text("".join(lines))
    if diagnostics:
        records = [{"update": u, "attn_logit": {"layers.0": 1.0, "layers.1": diagnostics["attn"] * u / 3},
                    "layer_rms": {"layers.0": 1.0, "layers.1": diagnostics["rms"] * u / 3}, "abs_log_z": diagnostics["z"] * (4 - u)}
                   for u in (2, 3)]  # fmt: skip
        (run_dir / "diagnostics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


# {width: {scheme: (l0, {lr: final loss, None: diverged})}}
RUNS = {"w8": {"a": (8.0, {"1e-3": 5.0, "1e-2": 4.0, "1e-1": None}), "b": (8.5, {"1e-3": 5.5, "1e-2": 3.5, "1e-1": 9.0})},
        "w16": {"a": (8.0, {"1e-3": 4.0, "1e-2": 3.0, "1e-1": None}), "b": (8.0, {"1e-3": 4.0, "1e-2": 3.0, "1e-1": 2.0})}}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Two widths (8 and 16, the narrower given second), two schemes, three LRs; the manifests of normformer-sweep."""
    root = tmp_path_factory.mktemp("lrs")
    spec = {"name": "lrs", "baseline": "a", "each_size": True, "train": [], "schemes": {
                "a": {"label": "A", "lrs": ["1e-3", "1e-2", "1e-1"]}, "b": {"label": "B", "lrs": ["1e-3", "1e-2", "1e-1"]}},
            "scales": {"tiny": {"sizes": {"w16": {"width": "16"}, "w8": {"width": "8"}}}}}  # fmt: skip
    (root / "lrs.yaml").write_text(yaml.safe_dump(spec))
    (root / "data").mkdir()
    (root / "data" / "dict.txt").write_text("")
    out = root / "out"
    run_cli(["normformer-sweep", root / "lrs.yaml", "--data", root / "data", "--out", out, "--dry-run"])
    for size, schemes in RUNS.items():
        for name, (initial, finals) in schemes.items():
            for lr, final in finals.items():
                stable = {"attn": 2.0 * len(size), "rms": 3.0, "z": 0.5} if final is not None else None
                write_run(out / size / "grid" / f"{name}-lr{lr}", initial, final, stable)
    run_cli(["normformer-analyze", "lr-sensitivity", out])
    return out


def test_each_scheme_and_width_gets_the_formulas_values_and_the_diagnostics_of_its_largest_stable_lr(study):
    read = json.loads((study / "lr_sensitivity.json").read_text())
    assert list(read["widths"]) == ["8", "16"] and read["baseline"] == "a" and read["labels"] == {"a": "A", "b": "B"}
    for size, schemes in RUNS.items():
        for name, (initial, finals) in schemes.items():
            s = read["widths"][size[1:]][name]
            assert s["initial_loss"] == initial and s["diverged"] == [lr for lr, v in finals.items() if v is None]
            assert s["lr_sensitivity"] == pytest.approx(lr_sensitivity(finals, initial))
            assert (s["best_loss"], s["best_lr"]) == best_loss(finals, initial)
            stable = largest_stable_lr(finals, initial)
            assert s["largest_stable_lr"] == stable and s["diagnostics_update"] == 3
            assert (s["attn_logit"], s["last_layer_rms"], s["abs_log_z"]) == (2.0 * len(size), 3.0, 0.5)
    b8 = read["widths"]["8"]["b"]  # 1e-1 finished above l0: capped, not stable, not diverged
    assert b8["capped_losses"] == {"1e-3": 5.5, "1e-2": 3.5, "1e-1": 8.5} and b8["largest_stable_lr"] == "1e-2"
    assert b8["lr_sensitivity"] == pytest.approx((2.0 + 0.0 + 5.0) / 3)
    table = (study / "lr_sensitivity.md").read_text()
    assert "| 8 | B | 8.500 | 3.500 | 1e-2 |" in table and "| 16 | A | 8.000 | 3.000 | 1e-2 |" in table
    assert "Width 16: final validation loss by LR" in table and "| B | 4.000 | 3.000 | 2.000 |" in table


def test_the_trend_gives_each_width_each_schemes_difference_to_the_baseline_and_its_change(study):
    lines = (study / "lr_sensitivity_trend.md").read_text().split("\n\n")
    tables = {lines[k].strip(): lines[k + 1] for k in range(len(lines) - 1) if lines[k + 1].startswith("| Scheme")}
    rows = lambda title: {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]]  # noqa: E731
                          for r in tables[title].splitlines()[2:]}  # fmt: skip
    best = rows("Best final validation loss (base 2)")
    # B - A at width 8: 3.5 - 4.0; at 16: 2.0 - 3.0; the change from 8 to 16: -1.0 - (-0.5)
    assert [float(c) for c in best["B"]] == [3.5, 2.0, -0.5, -1.0, -0.5] and best["A"][2:] == ["—", "—", "—"]
    lr = rows("Largest stable LR")
    assert lr["A"][:2] == ["1e-2", "1e-2"] and [float(c) for c in lr["B"][2:]] == [1.0, 10.0, 10.0]  # ratios
    sensitivity = rows("LR sensitivity")
    expected = [lr_sensitivity(RUNS[w]["b"][1], RUNS[w]["b"][0]) - lr_sensitivity(RUNS[w]["a"][1], RUNS[w]["a"][0])
                for w in ("w8", "w16")]  # fmt: skip
    assert [float(c) for c in sensitivity["B"][2:]] == pytest.approx([*expected, expected[1] - expected[0]], abs=1e-3)


def test_the_curves_plot_each_widths_capped_losses_against_the_lr_in_one_panel_per_scheme(study):
    """lr_sensitivity.png, and the figure it is drawn from: in scheme A's and B's panels one line per width (the
    narrowest first) through the LRs and the capped final losses, a cross at l0 for each run that diverged."""
    from fairseq_normformer.analysis.plots import lr_sensitivity_figure

    assert (study / "lr_sensitivity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    figure = lr_sensitivity_figure(json.loads((study / "lr_sensitivity.json").read_text()))
    panels = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["A", "B"] and all(ax.get_xscale() == "log" for ax in panels)
    for ax, name in zip(panels, ("a", "b")):
        curves, crosses = ax.get_lines()[0::2], ax.get_lines()[1::2]
        assert [line.get_label() for line in curves] == ["width 8", "width 16"]
        for curve, cross, size in zip(curves, crosses, ("w8", "w16")):
            initial, finals = RUNS[size][name]
            assert list(curve.get_xdata()) == [1e-3, 1e-2, 1e-1]
            assert list(curve.get_ydata()) == [capped(v, initial) for v in finals.values()]
            assert list(cross.get_xdata()) == [float(lr) for lr, v in finals.items() if v is None]
            assert list(cross.get_ydata()) == [initial] * len(cross.get_xdata())


def test_every_finished_run_gives_its_diagnostics_by_lr_in_the_tables_and_the_figure(study):
    """Wortsman et al.'s growth with the LR: each finished run's last record (attention logit 2 * len(size), RMS 3,
    |log Z| 0.5 at update 3; write_run) and its largest |log Z| (1.0, update 2's), by LR in lr_sensitivity.json and
    .md, and in lr_sensitivity_diagnostics.png one row per diagnostic, one column per width, one line per scheme
    through its finished runs only."""
    from fairseq_normformer.analysis.plots import lr_diagnostics_figure

    read = json.loads((study / "lr_sensitivity.json").read_text())
    for size, schemes in RUNS.items():
        for name, (_, finals) in schemes.items():
            by_lr = read["widths"][size[1:]][name]["diagnostics_by_lr"]
            assert list(by_lr) == [lr for lr, v in finals.items() if v is not None]  # b's 1e-1 at width 8 ended above l0
            assert all((d["attn_logit"], d["abs_log_z"], d["last_layer_rms"], d["peak_abs_log_z"]) == (2.0 * len(size), 0.5, 3.0, 1.0)
                       for d in by_lr.values())  # fmt: skip
    table = (study / "lr_sensitivity.md").read_text()
    assert "Width 8: largest attention logit by LR" in table and "| A | 4 | 4 | — |" in table
    assert "Width 16: mean |log Z| by LR" in table and "| B | 0.5 | 0.5 | 0.5 |" in table
    assert "Width 16: largest mean |log Z| of a record by LR, over each" in table and "| B | 1 | 1 | 1 |" in table
    assert (study / "lr_sensitivity_diagnostics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = lr_diagnostics_figure(read).axes
    assert len(axes) == 8 and [ax.get_title() for ax in axes[:2]] == ["width 8", "width 16"]
    assert [ax.get_ylabel() for ax in axes[::2]] == ["largest attention logit", "mean |log Z|", "last layer's output RMS",
                                                "largest mean |log Z| of a record"]
    assert all(ax.get_xscale() == ax.get_yscale() == "log" for ax in axes)
    for ax, size in zip(axes[:2], ("w8", "w16")):  # the attention logits
        a, b = ax.get_lines()
        assert [a.get_label(), b.get_label()] == ["A", "B"] and list(a.get_xdata()) == [1e-3, 1e-2]
        assert list(b.get_xdata()) == [1e-3, 1e-2, 1e-1] and list(b.get_ydata()) == [2.0 * len(size)] * 3


def test_size_reads_only_the_widths_named_and_refuses_one_the_study_lacks(study, tmp_path):
    """--size w16: the study of width 16 alone, its numbers those of the whole study's; an unknown size, or --size
    on a sweep without sizes, is refused by name."""
    run_cli(["normformer-analyze", "lr-sensitivity", study, "--size", "w16", "--out-dir", tmp_path])
    alone, whole = (json.loads((d / "lr_sensitivity.json").read_text()) for d in (tmp_path, study))
    assert list(alone["widths"]) == ["16"] and alone["widths"]["16"] == whole["widths"]["16"]
    with pytest.raises(ValueError, match="no sweep of size w32 \\(it has w16, w8\\)"):
        read_study(study, ["w16", "w32"])
    with pytest.raises(ValueError, match="is one sweep, without sizes"):
        read_study(study / "w8", ["w8"])
