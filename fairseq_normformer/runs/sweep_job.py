"""One point of a sweep as a submitit job (runs/sweep.py, docs/cluster.md). Its job process unpickles this
module's classes by value (sweep.py registers it with cloudpickle), so it imports the standard library and
submitit only, not fairseq: a job starts in a fraction of a second and spends its time in fairseq-train."""
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import submitit

DONE = "done"  # run_dir.DONE, the run-directory convention's marker (this module may not import the package)
DIVERGED = "diverged"  # a run fairseq stopped on a numerical failure (normformer-analyze outcome): not run again
STOPPED = 75  # fairseq-train saved checkpoint_last on a signal and exited (fixes/save_on_signal.py)


@dataclass(frozen=True)
class Point:
    """One run: ``command`` (fairseq-train, torchrun, normformer-analyze lr-stability, which keeps its own
    train.log, or an evaluation of a finished run) with ``{node_rank}`` and ``{master_addr}`` left for the job to
    fill, its output in ``log_name``, ``marker`` written in ``run_dir`` once it succeeded."""

    run_dir: Path
    command: tuple
    label: str = ""
    log_name: str = "train.log"
    marker: str = DONE

    @property
    def log(self) -> Path:
        return self.run_dir / self.log_name

    @property
    def finished(self) -> bool:
        return settled(self.run_dir, self.marker)


def settled(run_dir: Path, marker: str = DONE) -> bool:
    """Done (``marker``), or diverged: never run again."""
    return (run_dir / marker).exists() or (run_dir / DIVERGED).exists()


class TrainJob:
    """submitit's callable for one point: fairseq-train (or torchrun) with its output appended to train.log;
    ``done`` when it succeeded, ``diverged`` when fairseq stopped on a numerical failure. On the signal before
    the time limit (or a preemption), submitit calls ``checkpoint``: fairseq-train gets SIGUSR1, saves
    checkpoint_last and exits 75, and the same point is requeued; fairseq-train resumes from checkpoint_last."""

    def __init__(self):
        self.process = None

    def __call__(self, point: Point) -> str:
        env = submitit.JobEnvironment()
        master = env.hostnames[0] if env.num_nodes > 1 else "localhost"
        command = [arg.format(node_rank=env.node, master_addr=master) for arg in point.command]
        point.run_dir.mkdir(parents=True, exist_ok=True)
        with open(point.log, "a", encoding="utf-8") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=ignore_usr2)
            status = self.process.wait()
        return finish(point, status, env.global_rank)

    def checkpoint(self, point: Point) -> submitit.helpers.DelayedSubmission:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGUSR1)
            try:  # not Popen.wait: __call__'s wait, which this signal interrupted, holds its lock
                os.waitpid(self.process.pid, 0)
            except ChildProcessError:  # already reaped
                pass
        return submitit.helpers.DelayedSubmission(TrainJob(), point)


def ignore_usr2():
    """In fairseq-train's process, before it starts: SIGUSR2 (submitit's signal, which SLURM sends to every process
    of the job step) ignored, so that only the job acts on it, through ``checkpoint``; the default would kill
    fairseq-train before it saved."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def finish(point: Point, status: int, rank: int) -> str:
    """The point's marker after fairseq-train exited with ``status`` (rank 0 writes it); an error names the log."""
    if status == 0:
        if rank == 0:
            (point.run_dir / point.marker).touch()
        return DONE
    if diverged(point.log):
        (point.run_dir / DIVERGED).touch()
        return DIVERGED
    if status == STOPPED:
        raise RuntimeError(f"{point.run_dir}: stopped on a signal with checkpoint_last saved: run the sweep again to resume")
    raise RuntimeError(f"{point.run_dir}: {Path(point.command[0]).name} exited with {status}; see {point.log}")


def diverged(log: Path) -> bool:
    """Whether fairseq stopped the run on a numerical failure (analysis/report.py grid_outcome), read in a
    child process: importing the analysis here would import fairseq into every job."""
    import sys

    script = ("import sys; from fairseq_normformer.analysis.report import grid_outcome; from fairseq_normformer."
              "analysis.training_log import read_training_log; print(grid_outcome(read_training_log(sys.argv[1])))")
    result = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True)
    return result.stdout.strip() == DIVERGED
