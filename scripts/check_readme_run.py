"""Rerun README.md's minimal run exactly as printed and check the perplexities README states.

    python scripts/check_readme_run.py [--workdir DIR] [--tolerance 0.01]

Runs the ```bash block that follows "A minimal run" in README.md with bash, in a temporary directory (or
``--workdir``), with this Python's environment first on PATH (instead of the block's ``source
.venv/bin/activate``) and ``OMP_NUM_THREADS=1``; then compares fairseq-train's last valid perplexity and
fairseq-eval-lm's test perplexity with README's "valid perplexity X" and "test perplexity Y" within a
relative ``--tolerance`` (default 1%). Exit status 1 when a figure is off. About 5 minutes on 2 cores.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"A minimal run.*?```bash\n(.*?)```", re.S)
DOCUMENTED = {"valid": re.compile(r"valid perplexity\**\s+([\d.]+)"), "test": re.compile(r"test perplexity\**\s+([\d.]+)")}
MEASURED = {"valid": re.compile(r"\| valid \| .*?\| ppl ([\d.]+)"), "test": re.compile(r"Perplexity: ([\d.]+)")}


def readme_commands(readme: str) -> str:
    """The minimal run's shell lines, without the venv activation."""
    block = BLOCK.search(readme).group(1)
    return "".join(line + "\n" for line in block.splitlines() if not line.startswith("source "))


def figures(text: str, patterns: dict) -> dict:
    """{split: the last number each pattern finds in ``text``}; a missing one is an error naming it."""
    found = {split: pattern.findall(text) for split, pattern in patterns.items()}
    missing = [split for split, values in found.items() if not values]
    if missing:
        raise SystemExit(f"check_readme_run: no {' or '.join(missing)} perplexity found")
    return {split: float(values[-1]) for split, values in found.items()}


def run(commands: str, workdir: Path) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # fmt: skip
    result = subprocess.run(["bash", "-e", "-c", commands], cwd=workdir, env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise SystemExit(f"check_readme_run: the commands failed (exit {result.returncode}):\n{output[-4000:]}")
    return output


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=None, help="where to run (default: a temporary directory)")
    parser.add_argument("--tolerance", type=float, default=0.01, help="relative tolerance (default 0.01)")
    args = parser.parse_args(argv)
    readme = README.read_text(encoding="utf-8")
    documented = figures(readme, DOCUMENTED)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        measured = figures(run(readme_commands(readme), workdir), MEASURED)
    off = [s for s in documented if abs(measured[s] - documented[s]) > args.tolerance * documented[s]]
    for split in documented:
        print(f"{split}: README {documented[split]}, measured {measured[split]}{'  OFF' if split in off else ''}")
    if off:
        raise SystemExit(f"check_readme_run: {', '.join(off)} perplexity differs from README by more than "
                         f"{args.tolerance:.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
