"""``make demo`` (fairseq_normformer.cli.demo) end to end, shrunk to seconds."""
import math
import os
import re
import subprocess

import pytest
from fairseq.data import Dictionary

from fairseq_normformer.analysis.training_log import read_training_log
from fairseq_normformer.cli.demo import (NORMFORMER_FLAGS, Run, compare_at, compared_update, get_parser, train_command,
                                         train_side_by_side, training_results, with_run_dir)
from fairseq_normformer.corpus.stdlib import build_corpus
from tests.cli.lm_params import expected_params
from tests.conftest import REPO_ROOT, python_warnings
from tests.distributed.fairseq_runs import forked_commands, forked_subprocesses

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

TINY = ["--updates", "16", "--layers", "1", "--embed-dim", "32", "--heads", "4", "--tokens-per-sample", "32",
        "--batch-size", "4", "--dropout", "0", "--vocab-size", "200", "--max-chars", "20000"]  # fmt: skip


THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # the demo's fairseq_env(1)


def demo(workdir, *args) -> str:
    """The demo as ``make demo`` runs it, its Python processes forked (``forked_commands``; the threads it sets)."""
    env = forked_commands({**os.environ, **THREADS})
    cmd = [env["PY"], "-m", "fairseq_normformer.cli.demo", "--workdir", str(workdir), *TINY, *args]
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, f"{result.stdout[-5000:]}\n{result.stderr[-5000:]}"
    logs = [path.read_text() for path in workdir.glob("runs/*/*.log")]
    assert python_warnings(result.stdout, result.stderr, *logs) == []
    return result.stdout


def table_rows(out: str) -> dict:
    """{model: (params, updates, lr, ppl, tokens/s)} from the demo's final table."""
    rows = re.findall(r"^(preln|normformer) +([\d,]+) +(\d+) +(\S+) +([\d.]+|inf|nan) +([\d,]+)$", out, re.M)
    number = lambda text: int(text.replace(",", ""))  # noqa: E731
    return {m: (number(p), int(u), float(lr), float(ppl), number(s)) for m, p, u, lr, ppl, s in rows}


def test_demo_trains_both_models_then_reuses_them(tmp_path):
    out = demo(tmp_path)
    rows = table_rows(out)
    assert set(rows) == {"preln", "normformer"}, out
    vocab = len(Dictionary.load(str(tmp_path / "corpus_v200_c20000" / "data-bin" / "dict.txt")))
    preln = expected_params(vocab, 1, 32, 128, 4, tied=True, normformer=False)
    normformer = expected_params(vocab, 1, 32, 128, 4, tied=True, normformer=True)
    assert (rows["preln"][0], rows["normformer"][0]) == (preln, normformer)
    for model, (_, updates, lr, ppl, speed) in rows.items():
        assert updates == 16 and lr == 3e-3 and math.isfinite(ppl) and ppl < vocab and speed > 0
        run_dir = next(tmp_path.glob(f"runs/{model}-*"))
        assert f"Perplexity: {ppl:.2f}" in (run_dir / "eval.log").read_text()
        # the threads of both commands (--threads 1), recorded once before them
        lines = (run_dir / "commands.sh").read_text().splitlines()
        assert lines[:2] == ["export OMP_NUM_THREADS=1", "export MKL_NUM_THREADS=1"] and len(lines) == 4
    assert "update    16" in out  # progress was shown

    again = demo(tmp_path)  # reuses the corpus, both runs and their evaluations
    assert again.count("reusing the finished run") == 2 and "training in" not in again
    assert "corpus:" in again and again.count("/eval.log") == 2
    assert {m: r[:4] for m, r in table_rows(again).items()} == {m: r[:4] for m, r in rows.items()}



def test_runs_stopped_after_different_updates_are_compared_where_both_validated(tmp_path):
    """Issue 53: a cap stopped Pre-LN after 568 and NormFormer after 537 of 600, both had validated at 516, and
    the demo printed no table. Two real runs stopped after different updates: compared at the last update both
    validated at (the end of epoch 1), on fairseq-train's valid perplexity there."""
    with forked_subprocesses(**THREADS):  # fairseq-preprocess and fairseq-train forked
        corpus = build_corpus(tmp_path / "corpus", fmt="lm", vocab_size=200, max_chars=20000)
        args = get_parser().parse_args(["--workdir", str(tmp_path), *TINY, "--tokens-per-sample", "64",
                                        "--batch-size", "16"])  # fmt: skip
        runs = [Run("preln", [], args.lr), Run("normformer", NORMFORMER_FLAGS, args.lr)]
        for run, updates in zip(runs, (25, 15)):
            args.updates = updates
            train_side_by_side([(run, with_run_dir(run, train_command(run, corpus.data_bin, args), tmp_path))], 1)
            run.results = training_results(run)
    args.updates = 25
    assert [run.results["updates"] for run in runs] == [25, 15]
    epoch_end = read_training_log(runs[1].dir / "train.log").epochs[0]["num_updates"]
    assert 2 * epoch_end > 15 > epoch_end  # both validated at the end of epoch 1, not later in common
    update = compared_update(runs, args)
    assert update == epoch_end
    logged = [re.search(rf'"valid_ppl": "([\d.]+)".*"valid_num_updates": "{update}"', (run.dir / "train.log").read_text())
              for run in runs]  # fmt: skip
    note = compare_at(runs, update, args)
    assert [(run.results["updates"], run.results["ppl"]) for run in runs] == [(update, float(m[1])) for m in logged]
    assert f"preln after 25, normformer after 15, of 25); they are compared at update {update}" in note


def test_runs_with_no_validation_in_common_are_not_compared(tmp_path):
    args = get_parser().parse_args(["--workdir", str(tmp_path), "--stop-time-hours", "0.1"])
    runs = [Run("preln", [], args.lr, results={"updates": 227, "validated": {227: 210.0}}),
            Run("normformer", [], args.lr, results={"updates": 203, "validated": {203: 230.0}})]  # fmt: skip
    with pytest.raises(SystemExit, match=r"no comparison: .*\(preln after 227, normformer after 203, of 600\)"):
        compared_update(runs, args)
    runs[0].results["updates"] = 203
    assert compared_update(runs, args) is None  # both stopped at the same update: compared there (eval-lm)


def test_make_demo_passes_demo_args_through():
    dry = subprocess.run(["make", "-n", "demo", "DEMO_ARGS=--updates 7 --lr 1e-3"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "-m fairseq_normformer.cli.demo --workdir work/demo --updates 7 --lr 1e-3" in dry
