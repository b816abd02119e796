"""Resume after SIGKILL: checkpoint_last.pt is never corrupt, and the resumed run reproduces the
uninterrupted one exactly (every logged loss, the final weights), for the causal LM and for
MLM+NSP (whose data order, NSP pairs and masking must come back too). Dropout is on."""
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils

import fairseq_normformer  # noqa: F401  (applies its fairseq fixes in this process)

from .distributed.fairseq_runs import (
    logged_updates,
    model_weights,
    start,
    tiny_bert_args,
    tiny_lm_args,
    train_in_process,
)

pytestmark = pytest.mark.slow  # make test-fast leaves it out (docs/install.md)

# Where a kill lands, found from the line fairseq-train has just printed (then a random delay):
KILL_POINTS = {
    "training": lambda line, update: f'"num_updates": "{update}"' in line,  # in the next update or save
    "saving": lambda line, update: "Saving checkpoint to" in line and f"_{update}.pt" in line,  # in torch.save
    "copying": lambda line, update: "Finished saving checkpoint to" in line and f"_{update}.pt" in line,
}  # "copying": fairseq copies checkpoint_1_N.pt to checkpoint_last.pt next


def train_until_killed(args, point: str, update: int, delay: float) -> str:
    """Start fairseq-train and SIGKILL it ``delay`` seconds after it prints the line of ``point``
    at ``update``; returns what it printed."""
    proc = start(args)
    printed = []
    for line in proc.stdout:
        printed.append(line)
        if KILL_POINTS[point](line, update):
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            break
    printed.append(proc.communicate(timeout=60)[0])
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point} {update}:\n" + "".join(printed)[-3000:]
    return "".join(printed)


def saved_updates(save_dir: Path) -> int:
    """The update checkpoint_last.pt was saved at, which must load (0: none saved yet)."""
    last = save_dir / "checkpoint_last.pt"
    if not last.exists():
        return 0
    return torch.load(last, map_location="cpu")["optimizer_history"][-1]["num_updates"]


def kill_and_resume(args, save_dir: Path, updates: int, kills: int, seed: int) -> dict:
    """Up to ``kills`` runs killed at seeded random points after the update they resume from,
    then one run to the end. Returns {update: logged stats} of all runs; an update logged twice
    (redone after a kill before its checkpoint) must have the same loss both times."""
    rng = random.Random(seed)
    logs = []
    for _ in range(kills):
        resumed_from = saved_updates(save_dir)
        if resumed_from >= updates - 1:
            break
        point, update = rng.choice(list(KILL_POINTS)), rng.randint(resumed_from + 1, updates - 1)
        logs.append(train_until_killed(args, point, update, delay=rng.uniform(0, 0.02)))
    saved_updates(save_dir)  # the last kill left a loadable checkpoint_last.pt too
    logs.append(train_in_process(args).stdout)  # the run to the end: in this process (no kill to survive)
    assert "Loaded checkpoint" in logs[-1]
    merged = {}
    for log in logs:
        for update, stats in logged_updates(log).items():
            first = merged.setdefault(update, stats)
            assert first["loss"] == stats["loss"], f"update {update} redone differently"
    return merged


def assert_reproduces(reference_log: str, reference_dir: Path, resumed: dict, resumed_dir: Path, updates: int):
    reference = logged_updates(reference_log)
    assert sorted(reference) == sorted(resumed) == list(range(1, updates + 1))
    for update in reference:
        assert resumed[update]["loss"] == reference[update]["loss"], f"loss at update {update}"
    resumed_weights = model_weights(resumed_dir / "checkpoint_last.pt")
    for name, weight in model_weights(reference_dir / "checkpoint_last.pt").items():
        assert torch.equal(resumed_weights[name], weight), name


@pytest.mark.parametrize("task, updates, kills, seed", [("lm", 6, 2, 0), ("mlm_nsp", 5, 1, 5)])
def test_sigkill_and_resume_reproduce_the_uninterrupted_run(task, updates, kills, seed, request, tmp_path):
    """The seeds pick kills while saving and while copying to checkpoint_last.pt (LM), and while
    copying (MLM+NSP)."""
    corpus = request.getfixturevalue("tiny_lm_corpus" if task == "lm" else "tiny_bert_corpus")
    make_args = tiny_lm_args if task == "lm" else tiny_bert_args
    args = lambda save_dir: make_args(corpus.data_bin, save_dir, "--dropout", "0.1", "--max-update", updates)
    reference_dir, resumed_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    reference_log = train_in_process(args(reference_dir)).stdout
    resumed = kill_and_resume(args(resumed_dir), resumed_dir, updates, kills, seed)
    assert_reproduces(reference_log, reference_dir, resumed, resumed_dir, updates)


def copy_forever(src_paths, dst):
    """Overwrite ``dst`` with each source in turn, the way save_checkpoint writes checkpoint_last.pt."""
    while True:
        for src in src_paths:
            checkpoint_utils.PathManager.copy(src, dst, overwrite=True)


def test_sigkill_during_the_copy_to_checkpoint_last_leaves_a_whole_file(tmp_path):
    """save_checkpoint copies the new checkpoint over checkpoint_last.pt; fairseq's plain copy,
    killed midway, leaves it truncated. Kills at random moments of a copy loop (which spends
    nearly all its time copying) must always leave one whole source."""
    sources = [tmp_path / "a.pt", tmp_path / "b.pt"]
    for i, src in enumerate(sources):
        src.write_bytes(bytes([i + 1]) * (32 << 20))
    dst = tmp_path / "checkpoint_last.pt"
    dst.write_bytes(sources[0].read_bytes())
    rng = random.Random(0)
    for _ in range(4):
        copier = multiprocessing.get_context("fork").Process(target=copy_forever, args=(sources, dst))
        copier.start()
        time.sleep(rng.uniform(0.1, 0.4))
        os.kill(copier.pid, signal.SIGKILL)
        copier.join()
        content = dst.read_bytes()
        whole_source = len(content) == 32 << 20 and content.count(content[:1]) == len(content)
        assert whole_source, "a partial checkpoint_last.pt"


def test_a_finished_run_run_again_trains_no_more(tiny_lm_corpus, tmp_path):
    """The same command after the run reached --max-update (a requeued job, a restart after the last
    save): fairseq trained update N + 1 and saved it over checkpoint_last; now nothing is trained."""
    args = tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, "--max-update", 2)
    first = train_in_process(args)
    saved = (tmp_path / "checkpoint_last.pt").read_bytes()
    again = train_in_process(args)
    assert sorted(logged_updates(first.stdout)) == [1, 2]
    assert "Loaded checkpoint" in again.stdout and logged_updates(again.stdout) == {}
    assert "nothing to train: update 2 reached --max-update 2" in again.stdout
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == saved


def test_unreadable_checkpoint_last_resumes_from_the_newest_intact_one(tiny_lm_corpus, tmp_path):
    """checkpoint_last.pt overwritten with random bytes, and the checkpoint of its update emptied (a disk
    fault): checkpoint_last is moved aside, the run resumes from checkpoint_1_3.pt and ends equal to the
    uninterrupted run."""
    args = lambda save_dir, updates: tiny_lm_args(tiny_lm_corpus.data_bin, save_dir, "--dropout", "0.1",
                                                  "--max-update", updates)  # fmt: skip
    reference_dir, healed_dir = tmp_path / "uninterrupted", tmp_path / "healed"
    reference = logged_updates(train_in_process(args(reference_dir, 5)).stdout)
    train_in_process(args(healed_dir, 4))
    last = healed_dir / "checkpoint_last.pt"
    random_bytes = bytes([0x42]) + random.Random(0).randbytes(last.stat().st_size - 1)  # not a pickle's 0x80
    last.write_bytes(random_bytes)
    (healed_dir / "checkpoint_1_4.pt").write_bytes(b"")
    resumed = train_in_process(args(healed_dir, 5))
    assert resumed.stderr.count("\n") == 1 and resumed.stderr.startswith(
        "fairseq-train: checkpoint_last.pt cannot be read (checkpoint_last.pt: neither a zip archive nor a pickle: "
        f"not a torch checkpoint): moved to {last}.corrupt; resuming from {healed_dir / 'checkpoint_1_3.pt'}"
    ), resumed.stderr
    assert (healed_dir / "checkpoint_last.pt.corrupt").read_bytes() == random_bytes
    assert {update: stats["loss"] for update, stats in logged_updates(resumed.stdout).items()} == {
        update: reference[update]["loss"] for update in (4, 5)
    }
    resumed_weights = model_weights(last)
    for name, weight in model_weights(reference_dir / "checkpoint_last.pt").items():
        assert torch.equal(resumed_weights[name], weight), name


def test_unreadable_checkpoint_last_alone_is_one_line_and_kept(tiny_lm_corpus, tmp_path):
    last = tmp_path / "checkpoint_last.pt"
    last.write_bytes(bytes([0x42]) + random.Random(1).randbytes(4096))
    before = last.read_bytes()
    result = train_in_process(tiny_lm_args(tiny_lm_corpus.data_bin, tmp_path, "--max-update", 1), check=False)
    assert result.returncode == 1 and result.stderr == (
        f"fairseq-train: error: {tmp_path / 'checkpoint_last'}.pt cannot be read (checkpoint_last.pt: neither a zip "
        f"archive nor a pickle: not a torch checkpoint) and no other checkpoint in {tmp_path} is intact: it was left "
        "as it is; resume from a copy with --restore-file, or move it away\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint_last.pt"] and last.read_bytes() == before
