"""A recipe's grid as jobs (normformer-sweep, docs/cluster.md): the points of a spec (recipes/sweeps/*.yaml), each
one fairseq-train run in its run directory (recipes/_run_dir.sh's convention), run through submitit on this
machine (LocalExecutor, N at a time) or on SLURM (an array). A point that is done (or diverged) is never run
again; a job signalled before its time limit or preempted stops fairseq-train, which saves checkpoint_last, and
submitit requeues the same point (``TrainJob.checkpoint``), which resumes from it.

What is run is decided from the run directories alone, so a second call continues the first: a scheme's grid
is widened along the ladder while its best LR is at an edge, and its seeds and variants start once its grid
is settled. The local executor calls until nothing is left; on SLURM, each call submits what can start now.
"""
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import cloudpickle
import submitit
import yaml

from .. import memory_plan, paper
from . import run_dir as rd
from . import sweep_job
from .sweep_job import Point, TrainJob, settled

cloudpickle.register_pickle_by_value(sweep_job)  # a job imports submitit, not fairseq (sweep_job.py)

REPO = Path(__file__).resolve().parents[2]
USER_DIR = REPO / "fairseq_normformer"
BIN = Path(sys.executable).parent
SLURM_JOB = "slurm_job"  # the id of the job a point was submitted as
ACTIVE_STATES = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING")
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
MANIFEST = "sweep.json"
SIGNAL_DELAY_S = 120  # seconds before the time limit that SLURM signals a job (a 125M save takes seconds)


class SpecError(ValueError):
    """A spec or command line the sweep cannot run: one line naming the problem."""


@dataclass
class Setup:
    """A spec and what the command line chose: where, at which scale or size, how many seeds."""

    spec: dict
    scale: str
    out: Path
    data: Optional[Path] = None
    size: Optional[str] = None
    gpus_per_node: int = 1
    nodes: int = 1
    gpu_memory: float = 32.0
    seeds: Optional[int] = None
    updates: Optional[int] = None
    dry_run: bool = False
    stability: dict = field(default_factory=dict)  # peak_lr, warmup_updates of the command line, over the spec's
    built: list = field(default_factory=list)  # the corpus build command, once run or printed

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def seed_count(self) -> int:
        return self.seeds or int(self.spec.get("seeds", 1))

    def variables(self) -> dict:
        updates = self.updates or int(self.spec.get("updates", 0))
        scale_vars = self.spec.get("paper_vars", {}) if self.size else self.scale_spec().get("vars", {})
        return {"updates": updates, "warmup": updates // 10, "scale": self.scale, **scale_vars}

    def scale_spec(self) -> dict:
        return self.spec["scales"][self.scale]


def load_spec(path) -> dict:
    """The spec at ``path`` (YAML), with the keys every sweep needs checked."""
    path = Path(path)
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"cannot read the spec {path}: {str(e).splitlines()[0]}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("schemes"), dict) or not spec["schemes"]:
        raise SpecError(f"{path}: a spec needs `schemes`, a mapping of name to label, flags and lrs")
    for name, scheme in spec["schemes"].items():
        if not scheme.get("lrs"):
            raise SpecError(f"{path}: scheme {name!r} has no `lrs`")
    for name, variant in spec.get("variants", {}).items():
        if variant.get("of") not in spec["schemes"]:
            raise SpecError(f"{path}: variant {name!r} varies {variant.get('of')!r}, which is not a scheme")
    return spec


def filled(args, variables: dict) -> list:
    """The spec's arguments as strings, {names} filled in, ``$paper_optimizer`` expanded (paper.optimizer_args)."""
    out = []
    for arg in args:
        if arg == "$paper_optimizer":
            out += paper.optimizer_args()
        else:
            out.append(str(arg).format(**variables) if isinstance(arg, str) else str(arg))
    return out


# --- the arguments every point shares -------------------------------------------------------------------
def data_dir(setup: Setup) -> Path:
    """--data, or the scale's built-in corpus (normformer-build-corpus, which reuses a finished one; printed, not
    run, in a dry run)."""
    if setup.data is not None:
        if not (setup.data / "dict.txt").exists():
            raise SpecError(f"--data {setup.data}: not a fairseq-preprocess directory (no dict.txt)")
        return setup.data
    if setup.size:
        raise SpecError("--size trains the paper's model: give --data, a fairseq-preprocess directory of your corpus")
    corpus = setup.scale_spec().get("corpus")
    if corpus is None:
        raise SpecError(f"scale {setup.scale} declares no corpus: give --data, a fairseq-preprocess directory")
    out = REPO / "work" / "recipes" / corpus["dir"]
    if not setup.built:
        setup.built = [str(BIN / "normformer-build-corpus"), "--out", str(out), *filled(corpus.get("build", []), {})]
        if not setup.dry_run:
            subprocess.run(setup.built, check=True, stdout=sys.stderr)
    return out / "data-bin"


def paper_size_args(setup: Setup) -> list:
    """The paper's run of --size on the sweep's GPUs (paper.py): model, batch, optimiser, schedule, and the
    precision and backend the memory plan picks for --gpu-memory, as the recipes' paper scale."""
    try:
        s = paper.size_settings(setup.size, "baseline", setup.world_size)
        plan = memory_plan.auto_plan(s["arch"], "memory-efficient-fp16", setup.world_size, s["batch_size"],
                                     s["tokens_per_sample"], setup.gpu_memory, s["dropout"] > 0)  # fmt: skip
    except (KeyError, ValueError) as e:
        raise SpecError(f"--size {setup.size}: {e}") from None
    print("\n".join(memory_plan.report_lines(plan)), file=sys.stderr)
    s["warmup_updates"] = paper.WARMUP_UPDATES
    paper.with_plan(s, plan)
    groups = paper.run_args(s)
    args = [*groups["MODEL"], *groups["BATCH"], *paper.optimizer_args(), *groups["SCHEDULE"], *s["precision"], *s["memory_args"]]
    if setup.updates:
        args += ["--total-num-update", str(setup.updates), "--max-update", str(setup.updates)]
    return args


def shared_args(setup: Setup) -> list:
    """The data directory and the arguments of every point, before its scheme's flags."""
    data = str(data_dir(setup))
    if setup.size:
        return [data, *filled(setup.spec.get("paper_train", []), setup.variables()), *paper_size_args(setup)]
    scale = setup.scale_spec()
    return [data, *filled(setup.spec.get("train", []), setup.variables()), *filled(scale.get("model", []), setup.variables())]


def launcher(setup: Setup) -> list:
    """fairseq-train, or with several GPUs the project's torchrun wrapper around it (one launcher per node)."""
    train = str(BIN / "fairseq-train")
    if setup.world_size == 1:
        return [train]
    nodes = ["--standalone"] if setup.nodes == 1 else ["--node-rank", "{node_rank}", "--master-addr", "{master_addr}",
                                                       "--master-port", "29500"]  # fmt: skip
    return [sys.executable, "-m", "fairseq_normformer.runs.torchrun", "--nnodes", str(setup.nodes), "--nproc-per-node",
            str(setup.gpus_per_node), *nodes, "--signals-to-handle", TORCHRUN_SIGNALS, train]  # fmt: skip


# --- the points -----------------------------------------------------------------------------------------
class Grid:
    """The points of one sweep, as far as its run directories decide them."""

    def __init__(self, setup: Setup):
        self.setup, self.spec = setup, setup.spec
        self.prefix = [*launcher(setup), *shared_args(setup)]
        self.lrs: Dict[str, List[str]] = {}
        self.best: Dict[str, Optional[str]] = {}
        for name in self.spec["schemes"]:
            self.lrs[name], self.best[name] = self.settle(name)

    def point(self, run_dir: Path, flags: list, lr: str, seed: int, label: str) -> Point:
        variables = {**self.setup.variables(), "run_dir": run_dir}
        args = [*filled(flags, variables), "--lr", lr, *filled(self.spec.get("point", []), variables)]
        command = [*self.prefix, *args, "--seed", str(seed), "--user-dir", str(USER_DIR), "--save-dir", str(run_dir / "checkpoints")]
        return Point(run_dir, tuple(command), label.format(**variables))

    def grid_dir(self, name: str, lr: str) -> Path:
        return self.setup.out / "grid" / f"{name}-lr{lr}"

    def settle(self, name: str) -> tuple:
        """(the LRs of scheme ``name``'s grid, its best LR): None while a run of the grid is not settled (a dry run
        takes the grid's middle LR, as the recipes' DRY_RUN did) or when every run of it diverged."""
        scheme = self.spec["schemes"][name]
        lrs = [str(lr) for lr in scheme["lrs"]]
        if "best" in scheme:
            return lrs, str(scheme["best"])
        while all(settled(self.grid_dir(name, lr)) for lr in lrs):
            if not any(rd.is_done(self.grid_dir(name, lr)) for lr in lrs):
                return lrs, None
            best, position = best_lr({lr: self.grid_dir(name, lr) / "train.log" for lr in lrs}, self.spec.get("metric", "ppl"))
            widened = widen_grid(lrs, position, [str(lr) for lr in self.spec.get("ladder", [])])
            if widened == lrs:
                return lrs, best
            lrs = widened
        return lrs, lrs[len(lrs) // 2] if self.setup.dry_run else None

    def points(self) -> List[Point]:
        """Every point known now: each scheme's grid (seed 1), its seeds at its best LR, the variants of it."""
        points, seeds = [], range(1, self.setup.seed_count + 1)
        for name, scheme in self.spec["schemes"].items():
            label = scheme.get("label", name)
            points += [self.point(self.grid_dir(name, lr), scheme.get("flags", []), lr, 1, label) for lr in self.lrs[name]]
            best = self.best[name]
            if best is not None:
                points += [self.point(seed_dir(self.grid_dir(name, best), k), scheme.get("flags", []), best, k, label)
                           for k in seeds if k > 1]  # fmt: skip
        points += self.stability_points()
        for path, variant in self.spec.get("variants", {}).items():
            best = self.best[variant["of"]]
            if best is not None:
                points += [self.point(seed_dir(self.setup.out / path, k), variant["flags"], best, k, variant.get("label", path))
                           for k in seeds]  # fmt: skip
        return points

    def stability_points(self) -> List[Point]:
        """The spec's `stability`: each scheme's LR stability test (Table 3, normformer-analyze lr-stability), one
        seed, at the CPU scales: OUT/stability/NAME."""
        stability = self.spec.get("stability")
        if not stability or self.setup.size:
            return []
        stability = {**stability, **self.setup.stability}
        variables, data = self.setup.variables(), self.prefix[len(launcher(self.setup))]
        train = [*filled(stability["train"], variables), *filled(self.setup.scale_spec().get("model", []), variables)]
        points = []
        for name, scheme in self.spec["schemes"].items():
            run_dir = self.setup.out / "stability" / name
            command = [str(BIN / "normformer-analyze"), "lr-stability", data, "--peak-lr", str(stability["peak_lr"]),
                       "--warmup-updates", str(stability["warmup_updates"]), "--out-dir", str(run_dir), "--",
                       *train, *filled(scheme.get("flags", []), variables)]  # fmt: skip
            points.append(Point(run_dir, tuple(command), scheme.get("label", name), "stability.log"))
        return points

    def manifest(self) -> dict:
        """What normformer-analyze sweep reads: the spec, the scale, the seeds, each scheme's LRs and best."""
        return {"spec": self.spec, "scale": self.setup.scale, "seeds": self.setup.seed_count,
                "lrs": self.lrs, "best": self.best, "variables": self.setup.variables()}  # fmt: skip


def point_line(point: Point) -> str:
    """The shell line of commands.sh: the command with its output in train.log."""
    return rd.command_line(list(point.command), point.log)


def seed_dir(run_dir: Path, seed: int) -> Path:
    return run_dir if seed == 1 else run_dir / f"seed{seed}"


def best_lr(logs: Dict[str, Path], metric: str) -> tuple:
    from ..analysis.report import best_in_grid
    from ..analysis.training_log import read_training_log

    return best_in_grid({lr: read_training_log(path) for lr, path in logs.items()}, metric)


def widen_grid(lrs: List[str], position: str, ladder: List[str]) -> List[str]:
    """``lrs`` with the ladder's next LR beyond the edge where the best lies (``position``: lowest or highest);
    ``lrs`` itself when the best is inside or the ladder has no LR beyond that edge."""
    edge = {"lowest": (lrs[0], -1), "highest": (lrs[-1], 1)}.get(position)
    if edge is None or edge[0] not in ladder:
        return lrs
    beyond = ladder.index(edge[0]) + edge[1]
    if not 0 <= beyond < len(ladder):
        return lrs
    return [ladder[beyond], *lrs] if edge[1] < 0 else [*lrs, ladder[beyond]]


# --- executors ------------------------------------------------------------------------------------------
def run_local(points: List[Point], jobs: int, folder: Path) -> List[str]:
    """Each point as a submitit LocalExecutor job, ``jobs`` at a time (no time limit: a week); the errors of
    those that failed."""
    executor = submitit.LocalExecutor(folder)
    executor.update_parameters(timeout_min=7 * 24 * 60)
    pending, running, errors = list(points), [], []
    while pending or running:
        while pending and len(running) < jobs:
            running.append(executor.submit(TrainJob(), pending.pop(0)))
        time.sleep(0.2)
        for job in [job for job in running if job.done()]:
            running.remove(job)
            if job.exception() is not None:
                errors.append(str(job.exception()).strip().splitlines()[-1])
    return errors


def slurm_parameters(spec: dict, flags: dict) -> dict:
    """submitit's SLURM parameters: the spec's `slurm`, then the command line's; one task (launcher) per node, and
    --requeue, so that SLURM requeues a preempted job too (its point resumes from checkpoint_last)."""
    defaults = {"job_name": f"normformer-sweep-{spec.get('name', 'grid')}", "signal_delay_s": SIGNAL_DELAY_S}
    chosen = {**defaults, **spec.get("slurm", {}), **{k: v for k, v in flags.items() if v is not None}}
    chosen.update(ntasks_per_node=1, additional_parameters={"requeue": True})
    return {key: value for key, value in chosen.items() if value is not None}


def slurm_executor(folder: Path, parameters: dict, points: List[Point]) -> submitit.SlurmExecutor:
    """An executor whose sbatch script lists each array task's command (a comment per point, for the reader)."""
    executor = submitit.SlurmExecutor(folder)
    listing = [f"# array task {i}: {point_line(p)}" for i, p in enumerate(points)]
    executor.update_parameters(**parameters, setup=listing)
    return executor


def queued(point: Point, folder: Path) -> bool:
    """Whether the job a point was submitted as is still pending or running (sacct, through submitit)."""
    record = point.run_dir / SLURM_JOB
    if not record.exists():
        return False
    state = submitit.SlurmJob(folder, record.read_text().strip()).state
    return state.split()[0] in ACTIVE_STATES


def submit_slurm(points: List[Point], folder: Path, parameters: dict) -> List[str]:
    """The points as one array job; each point's job id in its run directory. The ids."""
    executor = slurm_executor(folder, parameters, points)
    jobs = executor.map_array(TrainJob(), points)
    for point, job in zip(points, jobs):
        point.run_dir.mkdir(parents=True, exist_ok=True)
        (point.run_dir / SLURM_JOB).write_text(job.job_id + "\n")
    return [job.job_id for job in jobs]


def sbatch_script(folder: Path, parameters: dict, points: List[Point]) -> str:
    """The sbatch script submit_slurm would submit (submitit's), for a dry run."""
    from submitit.slurm.slurm import _make_sbatch_string

    listing = [f"# array task {i}: {point_line(p)}" for i, p in enumerate(points)]
    command = f"srun --unbuffered --output ... {shlex.quote(sys.executable)} -u -m submitit.core._submit {folder}"
    return _make_sbatch_string(command=command, folder=folder, map_count=len(points), setup=listing, **parameters)


# --- a sweep --------------------------------------------------------------------------------------------
def write_manifest(setup: Setup, grid: Grid):
    import json

    setup.out.mkdir(parents=True, exist_ok=True)
    (setup.out / MANIFEST).write_text(json.dumps(grid.manifest(), indent=2, default=str) + "\n", encoding="utf-8")


def record(setup: Setup, points: List[Point]):
    """The corpus build (once) and each point's line, into OUT/commands.sh; printed in a dry run."""
    lines = [rd.log_command(setup.out, setup.built)] if setup.built and not (setup.out / rd.COMMANDS).exists() else []
    lines += [rd.log_command(setup.out, list(p.command), log=p.log) for p in points]
    if setup.dry_run:
        print("\n".join(lines))


def sweep_local(setup: Setup, jobs: int):
    """Run the sweep's points on this machine until none is left; widened grids and the points that wait for a
    grid's best start as soon as their grid is settled."""
    while True:
        grid = Grid(setup)
        write_manifest(setup, grid)
        todo = [p for p in grid.points() if not settled(p.run_dir)]
        if not todo or setup.dry_run:
            record(setup, todo)
            print(f"normformer-sweep: {len(grid.points()) - len(todo)} points done, {len(todo)} to run", file=sys.stderr)
            return
        record(setup, todo)
        errors = run_local(todo, jobs, setup.out / "submitit")
        if errors:
            raise RuntimeError(f"{len(errors)} points failed; the first: {errors[0]}")


def sweep_slurm(setup: Setup, parameters: dict):
    """Submit, as one SLURM array, the points that can start now and are neither done nor queued."""
    grid, folder = Grid(setup), setup.out / "slurm"
    write_manifest(setup, grid)
    todo = [p for p in grid.points() if not settled(p.run_dir) and (setup.dry_run or not queued(p, folder))]
    if setup.dry_run:
        print(sbatch_script(folder, parameters, todo))
        record(setup, todo)
        return
    if not todo:
        print("normformer-sweep: nothing to submit (every point is done or queued)", file=sys.stderr)
        return
    record(setup, todo)
    ids = submit_slurm(todo, folder, parameters)
    print(f"normformer-sweep: submitted {len(ids)} points as array job {ids[0].split('_')[0]}", file=sys.stderr)
