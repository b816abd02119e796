"""One run-directory convention (runs/run_dir.py and its shell side recipes/_run_dir.sh) and one
atomic-directory helper (runs/atomic.py)."""
import os
import shlex
import subprocess

import pytest

from fairseq_normformer.runs import run_dir
from fairseq_normformer.runs.atomic import atomic_directory
from tests.conftest import REPO_ROOT, recorded_commands


def shell(script, out, **env):
    source = f'REPO={shlex.quote(str(REPO_ROOT))} OUT={shlex.quote(str(out))}; source "$REPO/recipes/_run_dir.sh"; '
    return subprocess.run(["bash", "-c", source + script], capture_output=True, text=True, env={**os.environ, **env})


def test_shell_and_python_share_the_done_marker_and_the_commands_log(tmp_path):
    assert shell(f"mark_done {tmp_path}", tmp_path).returncode == 0
    assert run_dir.is_done(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    assert shell(f"is_done {other}", tmp_path).returncode == 1
    run_dir.mark_done(other)
    assert shell(f"is_done {other}", tmp_path).returncode == 0
    cmd = ["touch", str(tmp_path / "a file"), str(tmp_path / "b")]
    dry = shell(f"run {shlex.join(cmd)}", tmp_path, DRY_RUN="1")
    assert dry.returncode == 0 and not (tmp_path / "a file").exists()  # logged and printed, not run
    run_dir.log_command(tmp_path, cmd)
    assert recorded_commands(tmp_path / run_dir.COMMANDS) == [cmd, cmd] and shlex.split(dry.stdout) == cmd
    assert shell(f"run {shlex.join(cmd)}", tmp_path, DRY_RUN="0").returncode == 0 and (tmp_path / "a file").exists()


def test_commands_sh_sets_the_threads_each_command_ran_with_when_run_in_a_plain_shell(tmp_path):
    """Both sides record the thread settings before a command when they differ from the last recorded
    (export, or unset); run by a shell whose environment sets other values, each command sees its own."""
    cmd = ["sh", "-c", 'echo "${OMP_NUM_THREADS-unset} ${MKL_NUM_THREADS-unset}" >> seen']
    logged = shell(f"export OMP_NUM_THREADS=1; unset MKL_NUM_THREADS; run {shlex.join(cmd)}; run {shlex.join(cmd)}",
                   tmp_path, DRY_RUN="1")  # fmt: skip
    assert logged.returncode == 0, logged.stderr
    run_dir.log_command(tmp_path, cmd, {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
    run_dir.log_command(tmp_path, cmd, {})
    lines = (tmp_path / run_dir.COMMANDS).read_text().splitlines()
    assert [line for line in lines if run_dir.is_setting(line)] == [
        "export OMP_NUM_THREADS=1", "unset MKL_NUM_THREADS", "export OMP_NUM_THREADS=2", "export MKL_NUM_THREADS=2",
        "unset OMP_NUM_THREADS", "unset MKL_NUM_THREADS"]  # fmt: skip
    subprocess.run(["env", "-i", "OMP_NUM_THREADS=7", "MKL_NUM_THREADS=7", "bash", run_dir.COMMANDS], cwd=tmp_path,
                   check=True)  # fmt: skip
    assert (tmp_path / "seen").read_text().splitlines() == ["1 unset", "1 unset", "2 2", "unset unset"]


def test_commands_sh_recreates_each_log_where_the_run_left_it_when_run_in_a_plain_shell(tmp_path):
    """A command with its output in a log is recorded with the redirection (shell: run_in; Python: log_command
    with ``log``), so the file pasted into a plain shell writes the logs that later commands read."""
    out, shell_run, python_log = tmp_path / "out", tmp_path / "runs" / "a", tmp_path / "runs" / "b" / "eval.log"
    cmd = ["sh", "-c", "echo trained; echo warned >&2"]
    out.mkdir()
    assert shell(f"run_in {shell_run} {shell_run}/train.log {shlex.join(cmd)}", out).returncode == 0
    run_dir.log_command(out, ["sh", "-c", "echo evaluated"], log=python_log, append=True)
    python_log.parent.mkdir(parents=True)
    python_log.write_text("evaluated\n")  # what the caller's run writes
    expected = {path: path.read_text() for path in (shell_run / "train.log", python_log)}
    assert expected[shell_run / "train.log"] == "trained\nwarned\n"
    assert recorded_commands(out / run_dir.COMMANDS) == [cmd, ["sh", "-c", "echo evaluated"]]
    subprocess.run(["rm", "-r", str(tmp_path / "runs")], check=True)
    subprocess.run(["env", "-i", "bash", run_dir.COMMANDS], cwd=out, check=True)
    assert {path: path.read_text() for path in expected} == expected


def test_run_in_marks_a_run_done_only_when_it_succeeds_and_reuses_it(tmp_path):
    ok, failed = tmp_path / "ok", tmp_path / "failed"
    assert shell(f"run_in {ok} {ok}/log echo trained", tmp_path).returncode == 0
    assert run_dir.is_done(ok) and (ok / "log").read_text() == "trained\n"
    again = shell(f"run_in {ok} {ok}/log echo trained again", tmp_path)
    assert "finished before, reused" in again.stderr and (ok / "log").read_text() == "trained\n"
    result = shell(f"run_in {failed} {failed}/log false", tmp_path)
    assert result.returncode == 1 and not run_dir.is_done(failed) and "failed; see" in result.stderr


def test_atomic_directory_is_complete_or_absent(tmp_path):
    out = tmp_path / "sub" / "out"
    with atomic_directory(out) as tmp:
        assert tmp.name.startswith(".out.tmp-") and not out.exists()
        (tmp / "a").write_text("1")
    assert (out / "a").read_text() == "1" and sorted(p.name for p in out.parent.iterdir()) == ["out"]
    failed = tmp_path / "failed"
    with pytest.raises(RuntimeError):
        with atomic_directory(failed) as tmp:
            (tmp / "a").write_text("1")
            raise RuntimeError("build failed")
    assert list(tmp_path.iterdir()) == [tmp_path / "sub"]  # neither the destination nor the tmp dir
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic_directory(empty) as tmp:
        (tmp / "b").write_text("2")
    assert (empty / "b").read_text() == "2"
    with pytest.raises(OSError):  # a non-empty destination is left as it is
        with atomic_directory(empty) as tmp:
            (tmp / "c").write_text("3")
    assert [p.name for p in empty.iterdir()] == ["b"] and sorted(p.name for p in tmp_path.iterdir()) == ["empty", "sub"]
