"""normformer-sweep --archive (runs/archive.py): settled runs kept without their checkpoints, named by their corpus,
restored into another sweep directory. The sweep's own use of it is in test_sweep.py (real runs)."""
import os
import tarfile
from pathlib import Path

from fairseq_normformer.runs.archive import Archive, corpus_id


def a_run(run_dir: Path, log: str = "update 1\n") -> Path:
    """A settled run directory as fairseq-train and the sweep leave it: its log, marker, a record, checkpoints."""
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "checkpoint_last.pt").write_bytes(b"\0" * 64)
    (run_dir / "train.log").write_text(log)
    (run_dir / "diagnostics.jsonl").write_text('{"num_updates": 10}\n')
    (run_dir / "done").touch()
    return run_dir


def test_a_kept_run_holds_its_files_not_its_checkpoints_or_seeds_and_is_the_same_bytes_each_time(tmp_path):
    out = tmp_path / "out"
    run = a_run(out / "w64" / "grid" / "preln-lr1e-3")
    seed2 = a_run(run / "seed2", log="seed 2\n")
    kept = Archive(tmp_path / "archive", "0123456789ab", out)
    kept.keep(run)
    kept.keep(seed2)
    path = tmp_path / "archive" / "0123456789ab" / "w64" / "grid" / "preln-lr1e-3.tar.xz"
    assert kept.path(run) == path and kept.archived() == [run, seed2]
    with tarfile.open(path) as tar:
        assert tar.getnames() == ["diagnostics.jsonl", "done", "train.log"]
        assert tar.extractfile("train.log").read() == b"update 1\n"
        assert {(m.mtime, m.uid, m.uname, m.mode) for m in tar.getmembers()} == {(0, 0, "", 0o644)}
    first = path.read_bytes()
    os.utime(run / "train.log", (1e9, 1e9))
    kept.keep(run)
    assert path.read_bytes() == first
    assert not list(path.parent.glob(".*"))  # no partial file left


def test_restore_fills_the_runs_not_started_here_and_names_the_other_corpora(tmp_path, capsys):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    runs = [a_run(out / "grid" / name, log=f"{name}\n") for name in ("preln-lr1e-3", "normformer-lr1e-3")]
    a_run(out / "grid" / "preln-lr1e-3" / "seed2", log="seed 2\n")
    kept = Archive(tmp_path / "archive", "0123456789ab", out)
    for run_dir in out.rglob("done"):
        kept.keep(run_dir.parent)
    Archive(tmp_path / "archive", "ba9876543210", out).keep(runs[0])  # the same run on another corpus
    started = elsewhere / "grid" / "normformer-lr1e-3"
    started.mkdir(parents=True)
    (started / "train.log").write_text("a run under way here\n")
    assert Archive(tmp_path / "archive", "0123456789ab", elsewhere).restore() == 2
    assert (elsewhere / "grid" / "preln-lr1e-3" / "train.log").read_text() == "preln-lr1e-3\n"
    assert (elsewhere / "grid" / "preln-lr1e-3" / "seed2" / "train.log").read_text() == "seed 2\n"
    assert (started / "train.log").read_text() == "a run under way here\n" and not (started / "done").exists()
    assert not (elsewhere / "grid" / "preln-lr1e-3" / "checkpoints").exists()
    line = capsys.readouterr().err
    assert "also holds runs on another corpus (ba9876543210), not used" in line and "corpus is 0123456789ab" in line


def test_update_keeps_a_run_again_only_when_a_file_changed_since(tmp_path):
    out = tmp_path / "out"
    run = a_run(out / "grid" / "preln-lr1e-3")
    kept = Archive(tmp_path / "archive", "0123456789ab", out)
    kept.update(run)
    path = kept.path(run)
    os.utime(path, (2e9, 2e9))
    kept.update(run)  # nothing newer than the archive: not written
    assert path.stat().st_mtime == 2e9
    (run / "eval_valid.log").write_text("evaluated\n")
    os.utime(run / "eval_valid.log", (2e9 + 1, 2e9 + 1))
    kept.update(run)
    with tarfile.open(path) as tar:
        assert "eval_valid.log" in tar.getnames()


def test_the_corpus_id_reads_each_data_file_but_the_logs(tmp_path):
    data = tmp_path / "data-bin"
    data.mkdir()
    for name, content in {"dict.txt": b"a 1\n", "train.bin": b"\1\2\3\4", "train.idx": b"MMIDIDX", "preprocess.log": b"x"}.items():
        (data / name).write_bytes(content)
    first = corpus_id(data)
    assert len(first) == 12 and int(first, 16) >= 0
    (data / "preprocess.log").write_text("built elsewhere, in another directory\n")
    assert corpus_id(data) == first
    (data / "train.bin").write_bytes(b"\1\2\3\5")
    assert corpus_id(data) != first
    (data / "train.bin").write_bytes(b"\1\2\3\4")
    assert corpus_id(data) == first
    (data / "train.bin").rename(data / "valid.bin")
    assert corpus_id(data) != first


def test_a_damaged_archive_or_a_file_as_the_archive_is_one_line_naming_it(tmp_path, tiny_lm_corpus):
    """normformer-sweep --archive: a run's archive that is not one, or --archive naming a file, stops the sweep before
    it trains, in one line that names the path; nothing is restored."""
    from tests.conftest import console_script, in_process
    from tests.runs.test_sweep import tiny_spec

    spec, out = tiny_spec(tmp_path / "tiny.yaml"), tmp_path / "out"
    damaged = tmp_path / "archive" / corpus_id(tiny_lm_corpus.data_bin) / "grid" / "preln-lr1e-3.tar.xz"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not xz")
    (tmp_path / "a-file").write_text("")
    for archive, status, message in ((tmp_path / "archive", 1, f"{damaged}: not an archive of a run"),
                                     (tmp_path / "a-file", 2, f"--archive {tmp_path / 'a-file'}: not a directory")):
        argv = ["normformer-sweep", spec, "--data", tiny_lm_corpus.data_bin, "--out", out, "--archive", archive]
        result = in_process(console_script("normformer-sweep"), list(map(str, argv)), tmp_path, {}, None)
        assert result.returncode == status and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert result.stderr.startswith(f"normformer-sweep: error: {message}"), result.stderr
        assert not (out / "grid" / "preln-lr1e-3").exists() and not list(out.rglob("train.log"))
