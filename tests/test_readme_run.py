"""scripts/check_readme_run.py finds README's minimal-run commands and the perplexities README states
(running them takes minutes: the script is run by hand, see README)."""
import importlib.util

from tests.conftest import REPO_ROOT


def load_script():
    spec = importlib.util.spec_from_file_location("check_readme_run", REPO_ROOT / "scripts" / "check_readme_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_reads_readmes_commands_and_figures():
    script = load_script()
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    commands = script.readme_commands(readme).splitlines()
    assert commands[0].startswith("normformer-build-corpus --out work/corpus")
    assert [c.split()[0] for c in commands if c and not c.startswith(" ")] == [
        "normformer-build-corpus", "fairseq-train", "fairseq-eval-lm"]  # fmt: skip
    documented = script.figures(readme, script.DOCUMENTED)
    for split, value in documented.items():
        assert f"{split} perplexity {value}" in readme
