"""normformer-analyze lr-grid on synthetic fairseq-train logs: the best LR by final validation perplexity, where
it lies in the grid (the recipe extends a grid whose best is at an edge), and diverged runs."""
import pytest

from fairseq_normformer.cli.analyze import main as analyze
from tests.analysis.test_training_log import write_log

DONE = "2026-01-01 10:00:00 | INFO | fairseq_cli.train | done training in 6.0 seconds\n"  # fairseq-train's last line
DIVERGED = "FloatingPointError: gradients are Nan/Inf\n"


def grid_log(path, final_ppl, ending=DONE):
    """A run validated at updates 3 and 6, ending with ``ending``."""
    write_log(path, "json", {3: final_ppl + 10, 6: final_ppl}, seconds_per_update=1)
    with open(path, "a") as f:
        f.write(ending)
    return path


def lr_grid(tmp_path, capsys, runs: dict):
    """Runs lr-grid on {lr: (final ppl, ending)}; (its printed words, its table's rows)."""
    argv = ["lr-grid", "--out", str(tmp_path / "grid.md")]
    for lr, (ppl, ending) in runs.items():
        argv += ["--run", f"{lr}={grid_log(tmp_path / f'{lr}.log', ppl, ending)}"]
    analyze(argv)
    rows = [line.split("|")[1:-1] for line in (tmp_path / "grid.md").read_text().splitlines() if line.startswith("| ")]
    return capsys.readouterr().out.split(), [[cell.strip() for cell in row] for row in rows[1:]]


@pytest.mark.parametrize("ppl, expected", [((120, 100, 110), ["3e-3", "inside"]),
                                           ((90, 100, 110), ["1e-3", "lowest"]),
                                           ((120, 100, 95), ["1e-2", "highest"])])  # fmt: skip
def test_the_best_lr_and_where_it_lies_in_numeric_order(tmp_path, capsys, ppl, expected):
    # given out of order: "1e-2" sorts before "1e-3" as text, after it as a number
    printed, rows = lr_grid(tmp_path, capsys, {"1e-2": (ppl[2], DONE), "1e-3": (ppl[0], DONE), "3e-3": (ppl[1], DONE)})
    assert printed == expected
    assert [row[0] for row in rows] == ["1e-3", "3e-3", "1e-2"]
    assert [float(row[4]) for row in rows] == pytest.approx(list(ppl))
    assert {row[2] for row in rows} == {"finished"} and {row[3] for row in rows} == {"6"}


def test_a_diverged_run_is_never_the_best_and_brackets_from_above(tmp_path, capsys):
    printed, rows = lr_grid(tmp_path, capsys, {"1e-3": (120, DONE), "3e-3": (100, DONE), "1e-2": (50, DIVERGED)})
    assert printed == ["3e-3", "inside"]
    assert [row[2] for row in rows] == ["finished", "finished", "diverged"]
    assert "Best: 3e-3 (inside of the grid)" in (tmp_path / "grid.md").read_text()


def test_a_run_cut_short_is_unfinished_and_a_grid_with_no_finished_run_is_refused(tmp_path, capsys):
    printed, rows = lr_grid(tmp_path, capsys, {"1e-3": (120, DONE), "3e-3": (100, "")})
    assert printed == ["1e-3", "lowest"] and [row[2] for row in rows] == ["finished", "unfinished"]
    with pytest.raises(SystemExit, match="no run of the grid .LRs 1e-3, 3e-3. finished"):
        lr_grid(tmp_path, capsys, {"1e-3": (120, DIVERGED), "3e-3": (100, "")})
    with pytest.raises(SystemExit):
        analyze(["lr-grid", "--run", f"fast={tmp_path / '1e-3.log'}", "--out", str(tmp_path / "g.md")])
    assert "expected LR=PATH with LR a number, got 'fast=" in capsys.readouterr().err


def test_the_metric_compared_is_chosen_and_must_be_in_the_logs(tmp_path, capsys):
    runs = [f"--run={lr}={grid_log(tmp_path / f'{lr}.log', ppl)}" for lr, ppl in (("1e-3", 120), ("3e-3", 100))]
    analyze(["lr-grid", *runs, "--metric", "loss", "--out", str(tmp_path / "g.md")])  # every run's valid loss is 6.0
    assert capsys.readouterr().out.split() == ["1e-3", "lowest"]  # the first of equals
    assert "| LR | Params | Outcome | Updates | Valid loss |" in (tmp_path / "g.md").read_text()
    with pytest.raises(SystemExit, match="has no 'mlm_ppl'"):
        analyze(["lr-grid", *runs, "--metric", "mlm_ppl", "--out", str(tmp_path / "g.md")])


@pytest.mark.parametrize("ending, expected", [(DONE, "finished"), (DIVERGED, "diverged"), ("", "unfinished"),
                                              ("FloatingPointError: Minimum loss scale reached (0.0001).\n", "diverged"),
                                              ("ActivationOverflowError: layers.0 > 65504\n", "diverged")])  # fmt: skip
def test_outcome_prints_how_one_run_ended_as_lr_grid_judges_it(tmp_path, capsys, ending, expected):
    analyze(["outcome", str(grid_log(tmp_path / "run.log", 100, ending))])
    assert capsys.readouterr().out.split() == [expected]
