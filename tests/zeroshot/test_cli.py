"""normformer-zero-shot: make-stdlib-tasks and score through the console script, table and the
error path through its main(); what they print and write is what the library computes in-process."""
import json
import re
from pathlib import Path
from statistics import mean

import pytest

from fairseq_normformer.cli.zero_shot import main
from fairseq_normformer.zeroshot.evaluate import evaluate_tasks, load_files
from tests.conftest import run_cli

HEADER = "| Model | Size | GPU Days | LR | Seeds | HS | PI | WG | SC | OB | Avg | Δ Avg vs first model (95% CI) |"


@pytest.fixture(scope="module")
def cli_results(task_files, tiny_checkpoint, tiny_lm_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("zeroshot_cli")
    heldout = task_files["piqa"].parent.parent / "heldout.txt"
    made = run_cli(["normformer-zero-shot", "make-stdlib-tasks", "--raw", heldout, "--out-dir", out / "tasks",
                    "--examples", "12"])  # fmt: skip
    task_args = [arg for name in task_files for arg in (f"--{name}", out / "tasks" / task_files[name].name)]
    scored = run_cli(["normformer-zero-shot", "score", "--checkpoint", tiny_checkpoint, "--spm-model",
                      tiny_lm_corpus.spm_model, *task_args, "--normalization", "piqa=char", "--name", "tiny-nf",
                      "--output", out / "results.json"])  # fmt: skip
    return out, made.stdout, scored.stdout


def test_made_task_files_are_those_of_the_library(cli_results, task_files):
    out, stdout, _ = cli_results
    for name, path in task_files.items():
        assert f"{name}: {out / 'tasks' / path.name}" in stdout
        assert (out / "tasks" / path.name).read_bytes() == path.read_bytes()


def test_score_prints_and_writes_the_accuracies_computed_in_process(cli_results, scorer):
    out, _, stdout = cli_results
    results = json.loads((out / "results.json").read_text())
    files = {name: (Path(entry["file"]), None) for name, entry in results["tasks"].items()}
    expected = evaluate_tasks(scorer, load_files(files), {"piqa": "char"})
    assert set(results["tasks"]) == set(expected) and len(expected) == 5
    for name, summary in expected.items():
        line = re.search(rf"^{name} .*$", stdout, re.M).group(0)
        assert f"acc {summary['accuracy']:.2f} ({summary['normalization']})" in line
        written = results["tasks"][name]["accuracy_by_normalization"]
        assert written == pytest.approx(summary["accuracy_by_normalization"])
    assert results["model"]["name"] == "tiny-nf"
    assert results["model"]["lr"] == 3e-3 and results["model"]["updates"] == 30 and results["model"]["cpu"]


def test_table_has_the_papers_columns_and_the_scored_row(cli_results, capsys):
    out, _, _ = cli_results
    results = json.loads((out / "results.json").read_text())
    main(["table", str(out / "results.json"), "--output", str(out / "table1.md")])
    table = capsys.readouterr().out
    assert (out / "table1.md").read_text() == table
    lines = table.splitlines()
    assert lines[0] == HEADER
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]] for line in lines[2:4]}
    columns = ("hellaswag", "piqa", "winogrande", "storycloze", "openbookqa")
    accuracies = [results["tasks"][t]["accuracy"] for t in columns]
    assert cells["tiny-nf"][5:] == [f"{a:.1f}" for a in accuracies] + [f"{mean(accuracies):.1f}", "–"]
    assert cells["tiny-nf"][3:5] == ["0.003", "1"] and cells["tiny-nf"][2].startswith("CPU")
    chance = [100 / choices for choices in (4, 2, 2, 2, 4)]  # HS, PI, WG, SC, OB
    assert cells["Random"][5:] == [f"{c:.1f}" for c in chance] + [f"{mean(chance):.1f}", "–"]
    assert "WG = winogrande (12 examples, partial scoring, none)" in table


def test_bad_task_file_fails_before_loading_the_model(task_files, tmp_path):
    args = ["score", "--checkpoint", str(tmp_path / "none.pt"), "--spm-model", str(tmp_path / "none.model")]
    with pytest.raises(SystemExit, match=f"error: {task_files['hellaswag']}:1: missing field 'goal'"):
        main(args + ["--piqa", str(task_files["hellaswag"])])
    with pytest.raises(SystemExit, match="give at least one task file"):
        main(args)
    with pytest.raises(SystemExit, match="checkpoint not found"):
        main(args + ["--piqa", str(task_files["piqa"])])
