"""``make demo`` (fairseq_normformer.cli.demo) end to end, shrunk to seconds."""
import math
import re
import subprocess
import sys

from fairseq.data import Dictionary

from fairseq_normformer.cli.demo import Run, get_parser, why_not_comparable
from tests.cli.lm_params import expected_params
from tests.conftest import REPO_ROOT, python_warnings

TINY = ["--updates", "16", "--layers", "1", "--embed-dim", "32", "--heads", "4", "--tokens-per-sample", "32",
        "--batch-size", "4", "--dropout", "0", "--vocab-size", "200", "--max-chars", "20000"]  # fmt: skip


def demo(workdir, *args) -> str:
    cmd = [sys.executable, "-m", "fairseq_normformer.cli.demo", "--workdir", str(workdir), *TINY, *args]
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
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



def test_runs_stopped_after_different_updates_are_not_compared(tmp_path):
    args = get_parser().parse_args(["--workdir", str(tmp_path)])
    runs = [Run("preln", [], args.lr, results={"updates": 227}), Run("normformer", [], args.lr, results={"updates": 203})]
    reason = why_not_comparable(runs, args)  # issue 40: 227 and 203 of 600 were compared side by side
    assert reason.startswith("no comparison") and "preln after 227, normformer after 203, of 600" in reason
    runs[0].results["updates"] = 203
    assert why_not_comparable(runs, args) is None  # both stopped at the same update: compared there
