"""fairseq's own tests as a compatibility check of the plugin.

    python scripts/fairseq_suite.py FAIRSEQ_CHECKOUT [TEST_FILE ...] [--repeat N] [--json OUT]

FAIRSEQ_CHECKOUT holds fairseq's ``tests/`` (they are not in the wheel: ``git archive v0.12.3 tests``
of facebookresearch/fairseq). Each test file runs in two processes, against the installed fairseq:
- ``plugin``: with ``import fairseq_normformer`` first (every fix applied), as ``--user-dir`` does;
- ``allowlist``: with only the checkpoint allow-list (fixes/safe_globals.py), which any fairseq run on
  torch >= 2.6 needs to load its own checkpoints.
A test that passes in ``allowlist`` and fails in ``plugin`` is broken by the plugin; the script prints
those, the other differences, and the counts per file, and exits 1 when there is any. ``--repeat N``
runs each mode N times, to tell a flaky test (its pass rate) from a broken one.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FILES = (
    "tests/test_binaries.py", "tests/test_checkpoint_utils.py", "tests/test_reproducibility.py",
    "tests/test_train.py", "tests/test_iterators.py", "tests/test_sequence_generator.py", "tests/distributed",
)  # fmt: skip
# conftest-like pytest plugins, one per mode, given to pytest with -p from a temporary directory
MODE_PLUGINS = {
    "plugin": "import fairseq_normformer  # noqa: F401  (every fix applied)\n",
    "allowlist": (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('safe_globals', {str(REPO / 'fairseq_normformer/fixes/safe_globals.py')!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "module.allow_namespace_checkpoints()\n"
        "module.allow_metric_arrays_in_checkpoints()\n"
    ),
}  # fmt: skip


def outcomes(junit_xml: Path) -> dict:
    """{test id: passed|failed|skipped} of a pytest junit-xml report."""
    results = {}
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        results[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return results


def run_mode(checkout: Path, test_file: str, mode: str, workdir: Path) -> dict:
    plugin = workdir / f"fairseq_suite_{mode}.py"
    plugin.write_text(MODE_PLUGINS[mode])
    report = workdir / f"{mode}-{test_file.replace('/', '_')}.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workdir), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", f"fairseq_suite_{mode}", "-p", "no:cacheprovider",
               "--junitxml", str(report), test_file]  # fmt: skip
    subprocess.run(command, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not report.exists():
        raise SystemExit(f"fairseq_suite: pytest wrote no report for {test_file} ({mode}): is {checkout} fairseq's checkout?")
    return outcomes(report)


def pass_rates(runs: list) -> dict:
    """{test id: (passes, runs)} over repeated runs of one mode; skipped tests are left out."""
    counts = defaultdict(lambda: [0, 0])
    for results in runs:
        for test, outcome in results.items():
            if outcome != "skipped":
                counts[test][0] += outcome == "passed"
                counts[test][1] += 1
    return {test: tuple(count) for test, count in counts.items()}


def compare(rates: dict) -> dict:
    """The tests' classes: broken (always passes with the allow-list, never with the plugin), fixed (the
    reverse), flaky (passes some runs of a mode), both_fail; and per-mode pass counts."""
    tests = set(rates["plugin"]) | set(rates["allowlist"])
    classes = defaultdict(list)
    for test in sorted(tests):
        plugin, allowlist = rates["plugin"].get(test, (0, 0)), rates["allowlist"].get(test, (0, 0))
        always = {mode: n == runs > 0 for mode, (n, runs) in (("plugin", plugin), ("allowlist", allowlist))}
        never = {mode: n == 0 for mode, (n, _) in (("plugin", plugin), ("allowlist", allowlist))}
        if always["allowlist"] and never["plugin"]:
            classes["broken"].append(test)
        elif always["plugin"] and never["allowlist"]:
            classes["fixed"].append(test)
        elif never["plugin"] and never["allowlist"]:
            classes["both_fail"].append(test)
        elif not (always["plugin"] and always["allowlist"]):
            classes["flaky"].append(f"{test} (plugin {plugin[0]}/{plugin[1]}, allowlist {allowlist[0]}/{allowlist[1]})")
    return dict(classes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a directory holding fairseq's tests/ (git archive v0.12.3 tests)")
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES, help="test files or folders, relative to CHECKOUT")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode (a flaky test's pass rate)")
    parser.add_argument("--json", type=Path, help="also write the per-file results here")
    args = parser.parse_args(argv)
    if not (args.checkout / "tests" / "utils.py").is_file():
        parser.error(f"{args.checkout} has no tests/utils.py: not a checkout of fairseq's tests")
    report, broken = {}, 0
    with tempfile.TemporaryDirectory() as workdir:
        for test_file in args.files:
            rates = {mode: pass_rates([run_mode(args.checkout, test_file, mode, Path(workdir))
                                       for _ in range(args.repeat)]) for mode in MODE_PLUGINS}  # fmt: skip
            classes = compare(rates)
            counts = {mode: sum(n == runs for n, runs in rates[mode].values()) for mode in MODE_PLUGINS}
            report[test_file] = {"passed": counts, "tests": len(rates["allowlist"]), **classes}
            broken += len(classes.get("broken", []))
            print(f"{test_file}: {len(rates['allowlist'])} tests run; passed: plugin {counts['plugin']}, "
                  f"allowlist {counts['allowlist']}", flush=True)  # fmt: skip
            for kind in ("broken", "fixed", "flaky", "both_fail"):
                for test in classes.get(kind, []):
                    print(f"  {kind}: {test}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
