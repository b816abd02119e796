"""A recipe's grid as jobs (normformer-sweep, docs/cluster.md): the points of a spec (recipes/sweeps/*.yaml), each
one fairseq-train run in its run directory (recipes/_run_dir.sh's convention), run through submitit on this
machine (LocalExecutor, N at a time) or on SLURM (an array). A point that is done (or diverged) is never run
again; a job signalled before its time limit or preempted stops fairseq-train, which saves checkpoint_last, and
submitit requeues the same point (``TrainJob.checkpoint``), which resumes from it.

What is run is decided from the run directories alone, so a second call continues the first: a scheme's grid
is widened along the ladder while its best LR is at an edge, and its seeds and variants start once its grid
is settled. The local executor calls until nothing is left; on SLURM, each call submits what can start now.
Once every point is done, the spec's reports (the recipes' tables, normformer-analyze) are written.
"""
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional

import cloudpickle
import submitit
import yaml

from .. import memory_plan, paper
from . import run_dir as rd
from . import sweep_job
from .archive import Archive, corpus_id
from .sweep_job import Point, TrainJob, settled

cloudpickle.register_pickle_by_value(sweep_job)  # a job imports submitit, not fairseq (sweep_job.py)

REPO = Path(__file__).resolve().parents[2]
USER_DIR = REPO / "fairseq_normformer"
BIN = Path(sys.executable).parent
SLURM_JOB = "slurm_job"  # the id of the job a point was submitted as
ACTIVE_STATES = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING")
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
MANIFEST = "sweep.json"
STAGES = ("schemes", "stability", "variants")  # the points' order, unless a spec declares its `stages`
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
    overrides: dict = field(default_factory=dict)  # --set NAME=VALUE, over the spec's and the scale's variables
    report_dir: Optional[Path] = None  # where commands.sh and the reports go (default: out)
    spawn: Optional[int] = None  # --world-size: GPUs one fairseq-train spawns a process for each (no torchrun)
    batch_size: Optional[int] = None  # with --size: sequences per GPU (default: the paper's)
    tokens_per_sample: int = paper.TOKENS_PER_SAMPLE
    remote_data: bool = False  # --data is a path of the machines that run the points: not checked here
    schemes: Optional[List[str]] = None  # --schemes: the spec's schemes to run (default: all)
    extra: list = field(default_factory=list)  # fairseq-train arguments after `--`, added to every point's
    archive: Optional[Path] = None  # --archive: where settled runs are kept without checkpoints (runs/archive.py)

    @property
    def world_size(self) -> int:
        return self.spawn or self.gpus_per_node * self.nodes

    @property
    def seed_count(self) -> int:
        return self.seeds or int(self.spec.get("seeds", 1))

    @property
    def reports(self) -> Path:
        return self.report_dir or self.out

    def variables(self) -> dict:
        """{names} of the spec's strings: the spec's `vars`, the scale's (the paper's with --size), the size's, --set's."""
        scale_vars = {**self.spec.get("paper_vars", {}), **paper_lr_vars(self)} if self.size else self.scale_spec().get("vars", {})
        named = {**self.spec.get("vars", {}), **scale_vars, **self.size_vars(), **self.overrides}
        updates = self.updates or int(self.scale_spec().get("updates", self.spec.get("updates", 0)))
        return {"updates": updates, "warmup": updates // 10, "scale": self.scale, "seeds": self.seed_count,
                "out": self.out, "report_dir": self.reports, "world_size": self.world_size, **named}  # fmt: skip

    def size_vars(self) -> dict:
        """{size}: --size, or one of the scale's `sizes` (its variables too), named by --set size=NAME (default: the
        first)."""
        sizes = self.scale_spec().get("sizes", {})
        size = self.overrides.get("size", self.size or next(iter(sizes), None))
        if sizes and size not in sizes:
            raise SpecError(f"--set size={size}: scale {self.scale}'s sizes are {', '.join(sizes)}")
        return {} if size is None else {"size": size, **sizes.get(size, {})}

    def at_sizes(self) -> List["Setup"]:
        """The sweeps of one call: this one; with the spec's `each_size`, one per size of the scale (--set size=NAME:
        that one), each in OUT/SIZE with that size's variables, sharing commands.sh, the reports' directory and the
        corpus."""
        if not self.spec.get("each_size"):
            return [self]
        sizes = self.scale_spec().get("sizes")
        if not sizes:
            raise SpecError(f"the spec's `each_size` needs `sizes`, and scale {self.scale} declares none")
        names = [self.overrides["size"]] if "size" in self.overrides else list(sizes)
        return [replace(self, out=self.out / name, overrides={**self.overrides, "size": name}, report_dir=self.reports)
                for name in names]  # fmt: skip

    def scale_spec(self) -> dict:
        return self.spec.get("scales", {}).get(self.scale, {})


def paper_lr_vars(setup: Setup) -> dict:
    """With the spec's `paper_table`: {MODEL_lrs} of that table at --size (paper.py), each "LR LR ..." as the paper
    writes them, {MODEL_lr}, the first of them (the authors' LR, where a table gives one), {MODEL_arch}, and the
    table's {paper_warmup}, {dropout} and batch on the sweep's GPUs: {batch_size}, {update_freq}, {tokens_per_sample}."""
    table = setup.spec.get("paper_table")
    if table is None:
        return {}
    try:
        runs = {model: paper.settings(str(table), setup.size, model, setup.world_size, setup.batch_size,
                                      setup.tokens_per_sample) for model in paper.MODELS}  # fmt: skip
    except (KeyError, ValueError) as e:
        raise SpecError(f"--size {setup.size}: {e}") from None
    lrs = {model: list(map(paper.lr_text, s["lrs"])) for model, s in runs.items()}
    s = runs["baseline"]
    shared = {"paper_warmup": s["warmup_updates"], "dropout": s["dropout"], "batch_size": s["batch_size"],
              "update_freq": s["update_freq"], "tokens_per_sample": s["tokens_per_sample"]}  # fmt: skip
    return {**{f"{model}_lrs": " ".join(v) for model, v in lrs.items()}, **{f"{model}_lr": v[0] for model, v in lrs.items()},
            **{f"{model}_arch": s["arch"] for model, s in runs.items()}, **shared}  # fmt: skip


def load_spec(path) -> dict:
    """The spec at ``path`` (YAML; its `include`, a spec file beside it, under it), with the keys every sweep
    needs checked."""
    path = Path(path)
    spec = included(path)
    runs = ("schemes", "variants", "stability")
    if not isinstance(spec, dict) or not any(isinstance(spec.get(key), dict) for key in runs):
        raise SpecError(f"{path}: a spec needs `schemes`, a mapping of name to label, flags and lrs (or `variants`, `stability`)")
    spec.setdefault("schemes", {})
    for name, scheme in spec["schemes"].items():
        if not scheme.get("lrs"):
            raise SpecError(f"{path}: scheme {name!r} has no `lrs`")
    for name, variant in spec.get("variants", {}).items():
        if "lr" not in variant and variant.get("of") not in spec["schemes"]:
            raise SpecError(f"{path}: variant {name!r} varies {variant.get('of')!r}, which is not a scheme, and has no `lr`")
    return spec


def included(path: Path):
    """The YAML at ``path`` over its `include` (itself with its own `include`, and so on)."""
    spec = read_yaml(path)
    if isinstance(spec, dict) and "include" in spec:
        spec = merged(included(path.parent / spec.pop("include")), spec)
    return spec


def read_yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"cannot read the spec {path}: {str(e).splitlines()[0]}") from None


def merged(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s keys, mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def filled(args, variables: dict) -> list:
    """The spec's arguments as strings, {names} filled in, ``$paper_optimizer`` (paper.optimizer_args) and
    ``$paper_precision`` (paper.PRECISION, fp16 on GPUs) expanded."""
    out = []
    for arg in args:
        if arg == "$paper_optimizer":
            out += paper.optimizer_args()
        elif arg == "$paper_precision":
            out += paper.PRECISION
        else:
            out.append(str(arg).format(**variables) if isinstance(arg, str) else str(arg))
    return out


# --- the arguments every point shares -------------------------------------------------------------------
def data_dir(setup: Setup) -> Path:
    """--data, or the scale's built-in corpus (normformer-build-corpus, which reuses a finished one; printed, not
    run, in a dry run)."""
    if setup.data is not None:
        if not setup.remote_data and not (setup.data / "dict.txt").exists():
            raise SpecError(f"--data {setup.data}: not a fairseq-preprocess directory (no dict.txt)")
        return setup.data
    if setup.size:
        raise SpecError("--size trains the paper's model: give --data, a fairseq-preprocess directory of your corpus")
    corpus = setup.scale_spec().get("corpus")
    if corpus is None:
        raise SpecError(f"scale {setup.scale} declares no corpus: give --data, a fairseq-preprocess directory")
    out = REPO / "work" / "recipes" / corpus["dir"]
    if not setup.built:  # extended in place: the setups of Setup.at_sizes share it, and build once
        setup.built.extend([str(BIN / "normformer-build-corpus"), "--out", str(out), *filled(corpus.get("build", []), {})])
        if not setup.dry_run:
            subprocess.run(setup.built, check=True, stdout=sys.stderr)
    return out / "data-bin"


def paper_size_args(setup: Setup, model: str = "baseline") -> list:
    """The paper's run of --size on the sweep's GPUs (paper.py; with the spec's `paper_table`, that table's
    schedule): model, batch, optimiser, schedule, and the precision and backend the memory plan picks for
    --gpu-memory, as the recipes' paper scale."""
    try:
        s = paper.size_settings(setup.size, model, setup.world_size, setup.batch_size, setup.tokens_per_sample)
        s["warmup_updates"] = paper.TABLES.get(str(setup.spec.get("paper_table")), {}).get("warmup_updates", paper.WARMUP_UPDATES)
        plan = memory_plan.auto_plan(s["arch"], "memory-efficient-fp16", setup.world_size, s["batch_size"],
                                     s["tokens_per_sample"], setup.gpu_memory, s["dropout"] > 0)  # fmt: skip
    except (KeyError, ValueError) as e:
        raise SpecError(f"--size {setup.size}: {e}") from None
    print("\n".join(memory_plan.report_lines(plan)), file=sys.stderr)
    paper.with_plan(s, plan)
    groups = paper.run_args(s)
    args = [*groups["MODEL"], *groups["BATCH"], *paper.optimizer_args(), *groups["SCHEDULE"], *s["precision"], *s["memory_args"]]
    if setup.updates:
        args += ["--total-num-update", str(setup.updates), "--max-update", str(setup.updates)]
    return args


def shared_args(setup: Setup, model: str = "baseline") -> list:
    """The data directory and the arguments of every point, before its scheme's flags (with --size, those of the
    paper's ``model``: baseline or normformer)."""
    data = str(data_dir(setup))
    if setup.size:
        return [data, *filled(setup.spec.get("paper_train", []), setup.variables()), *paper_size_args(setup, model),
                *setup.extra]  # fmt: skip
    scale = setup.scale_spec()
    return [data, *filled(setup.spec.get("train", []), setup.variables()), *filled(scale.get("model", []), setup.variables()),
            *setup.extra]  # fmt: skip


def launcher(setup: Setup) -> list:
    """fairseq-train, or with several GPUs the project's torchrun wrapper around it (one launcher per node)."""
    train = str(BIN / "fairseq-train")
    if setup.world_size == 1 or setup.spawn:
        return [train]
    nodes = ["--standalone"] if setup.nodes == 1 else ["--node-rank", "{node_rank}", "--master-addr", "{master_addr}",
                                                       "--master-port", "29500"]  # fmt: skip
    return [sys.executable, "-m", "fairseq_normformer.runs.torchrun", "--nnodes", str(setup.nodes), "--nproc-per-node",
            str(setup.gpus_per_node), *nodes, "--signals-to-handle", TORCHRUN_SIGNALS, train]  # fmt: skip


# --- the points -----------------------------------------------------------------------------------------
class Grid:
    """The points of one sweep, as far as its run directories decide them, in the order of the spec's `stages`."""

    def __init__(self, setup: Setup):
        self.setup, self.spec = setup, setup.spec
        self.variables = setup.variables()
        self.prefixes: Dict[str, list] = {}
        self.prefix()  # the data and the paper's settings checked before anything is written
        self.lrs: Dict[str, List[str]] = {}
        self.best: Dict[str, Optional[str]] = {}
        for name in self.scheme_names():
            self.lrs[name], self.best[name] = self.settle(name)

    def scheme_names(self) -> List[str]:
        return self.setup.schemes or list(self.spec["schemes"])

    def prefix(self, model: str = "baseline") -> list:
        """The launcher and the shared arguments of a point (with --size, of the paper's ``model``)."""
        if model not in self.prefixes:
            self.prefixes[model] = [*launcher(self.setup), *shared_args(self.setup, model)]
        return self.prefixes[model]

    def point(self, run_dir: Path, run: dict, lr: str, seed: int) -> Point:
        """``run`` (a scheme or variant: flags, label, paper_model, and with --size paper_flags in place of its flags,
        default the same) at ``lr`` with ``seed`` in ``run_dir``."""
        variables = {**self.variables, "run_dir": run_dir, "lr": lr}
        flags = run.get("paper_flags", run.get("flags", [])) if self.setup.size else run.get("flags", [])
        args = [*filled(flags, variables), "--lr", lr, *filled(self.spec.get("point", []), variables)]
        command = [*self.prefix(run.get("paper_model", "baseline")), *args, "--seed", str(seed), "--user-dir", str(USER_DIR),
                   "--save-dir", str(run_dir / "checkpoints")]  # fmt: skip
        label = str(run.get("label", run_dir.name)).format(**variables)
        return Point(run_dir, tuple(command), self.spec.get("run_label", "{label}").format(**variables, label=label))

    def grid_dir(self, name: str, lr: str) -> Path:
        return rd.grid_dir(self.setup.out, self.spec, name, lr)

    def scheme(self, name: str) -> dict:
        return {"label": name, **self.spec["schemes"][name]}

    def scheme_lrs(self, name: str) -> List[str]:
        """The first LRs of scheme ``name``'s grid: a list, or a string of LRs ("{a scale's variable}")."""
        lrs = self.spec["schemes"][name]["lrs"]
        return filled([lrs], self.variables)[0].split() if isinstance(lrs, str) else filled(lrs, self.variables)

    def settle(self, name: str) -> tuple:
        """(the LRs of scheme ``name``'s grid, its best LR): None while a run of the grid is not settled (a dry run
        takes the grid's middle LR, as the recipes' DRY_RUN did) or when every run of it diverged."""
        scheme = self.spec["schemes"][name]
        lrs = self.scheme_lrs(name)
        if "best" in scheme:
            return lrs, filled([scheme["best"]], self.variables)[0]
        while all(settled(self.grid_dir(name, lr)) for lr in lrs):
            if not any(rd.is_done(self.grid_dir(name, lr)) for lr in lrs):
                return lrs, None
            best, position = best_lr({lr: self.grid_dir(name, lr) / "train.log" for lr in lrs}, self.spec.get("metric", "ppl"))
            widened = widen_grid(lrs, position, [str(lr) for lr in self.spec.get("ladder", [])])
            if widened == lrs:
                return lrs, best
            lrs = widened
        return lrs, lrs[len(lrs) // 2] if self.setup.dry_run else None

    def seeds(self, first: int = 1) -> range:
        return range(first, self.setup.seed_count + 1)

    def points(self) -> List[Point]:
        """Every point known now, stage by stage (the spec's `stages`; default: each scheme's grid and seeds, the
        stability tests, the variants)."""
        stages = {"schemes": self.scheme_points, "grids": self.grid_points, "seeds": self.seed_points,
                  "stability": self.stability_points, "variants": self.variant_points}  # fmt: skip
        points = [p for stage in self.spec.get("stages", STAGES) for p in stages[stage]()]
        return points + self.evaluation_points(points)

    def scheme_points(self) -> List[Point]:
        """Each scheme's grid, then its seeds."""
        return [p for name in self.scheme_names() for p in self.grid_points([name]) + self.seed_points([name])]

    def grid_points(self, names=None) -> List[Point]:
        """Each scheme's grid: one seed, or with `seeds_at: every_lr` every seed at every LR."""
        every = self.spec.get("seeds_at") == "every_lr"
        return [self.point(rd.seed_dir(self.grid_dir(name, lr), k), self.scheme(name), lr, k)
                for name in names or self.scheme_names() for lr in self.lrs[name]
                for k in (self.seeds() if every else [1])]  # fmt: skip

    def seed_points(self, names=None, grid_too: bool = False) -> List[Point]:
        """Each scheme at its best LR, every seed but the grid's (seed 1, when the best is in its grid; with
        ``grid_too`` that one too)."""
        if self.spec.get("seeds_at") == "every_lr" and not grid_too:
            return []
        return [self.point(rd.seed_dir(self.grid_dir(name, best), k), self.scheme(name), best, k)
                for name in names or self.scheme_names() if (best := self.best[name]) is not None
                for k in self.seeds(2 if best in self.lrs[name] and not grid_too else 1)]  # fmt: skip

    def variant_lr(self, variant: dict) -> Optional[str]:
        """A variant's LR: its own `lr`, else the best (`at: highest`: the highest) LR of the scheme it varies."""
        if "lr" in variant:
            return filled([variant["lr"]], self.variables)[0]
        of = variant["of"]
        return self.lrs[of][-1] if variant.get("at") == "highest" else self.best[of]

    def variant_points(self) -> List[Point]:
        """Each variant, every seed, in its own directory (its name, {lr} filled in)."""
        points = []
        for path, variant in self.spec.get("variants", {}).items():
            lr = self.variant_lr(variant)
            if lr is not None:
                run_dir = self.setup.out / path.format(**self.variables, lr=lr)
                points += [self.point(rd.seed_dir(run_dir, k), {"label": path, **variant}, lr, k) for k in self.seeds()]
        return points

    def stability_points(self) -> List[Point]:
        """The spec's `stability`: the LR stability test (Table 3, normformer-analyze lr-stability) of each of its
        `runs` (default: each scheme), at the CPU scales, and with its `paper` keys (over the others) at --size too;
        in OUT/`run_dir` (default stability/{name}), one seed, or with `every_seed` each (seed K in RUN_DIR/seedK)."""
        stability = self.spec.get("stability")
        if not stability or (self.setup.size and "paper" not in stability):
            return []
        stability = {**stability, **(stability["paper"] if self.setup.size else {}), **self.setup.stability}
        variables, data = self.variables, self.prefix()[len(launcher(self.setup))]
        train = [*filled(stability["train"], variables), *filled(self.setup.scale_spec().get("model", []), variables)]
        peak_lr, warmup = filled([str(stability["peak_lr"]), str(stability["warmup_updates"])], variables)
        runs = stability.get("runs") or {name: self.spec["schemes"][name] for name in self.scheme_names()}
        points = []
        for name, run in runs.items():
            flags = filled(run.get("paper_flags", run.get("flags", [])) if self.setup.size else run.get("flags", []), variables)
            for k in self.seeds() if stability.get("every_seed") else [1]:
                run_dir = rd.seed_dir(self.setup.out / stability.get("run_dir", "stability/{name}").format(name=name), k)
                command = [str(BIN / "normformer-analyze"), "lr-stability", data, "--peak-lr", peak_lr, "--warmup-updates",
                           warmup, "--out-dir", str(run_dir), "--", *train, *flags,
                           *(["--seed", str(k)] if stability.get("every_seed") else [])]  # fmt: skip
                points.append(Point(run_dir, tuple(command), run.get("label", name), "stability.log"))
        return points

    def evaluation_points(self, points: List[Point]) -> List[Point]:
        """The spec's `evaluate`: each training point, once done (a dry run: each), evaluated on each of its `splits`
        by its `command` (DATA --user-dir ..., its `args`, the scale's `eval`; {run_dir} and {split} filled in):
        RUN_DIR/eval_SPLIT.log, done at RUN_DIR/eval_SPLIT.done."""
        evaluate = self.spec.get("evaluate")
        if not evaluate:
            return []
        data, evaluations = self.prefix()[len(launcher(self.setup))], []
        for p in [p for p in points if p.log_name == "train.log" and (self.setup.dry_run or rd.is_done(p.run_dir))]:
            for split in evaluate["splits"]:
                variables = {**self.variables, "run_dir": p.run_dir, "split": split}
                command = [str(BIN / evaluate["command"]), data, "--user-dir", str(USER_DIR), *filled(evaluate["args"], variables),
                           *filled(self.setup.scale_spec().get("eval", []), variables)]  # fmt: skip
                evaluations.append(Point(p.run_dir, tuple(command), f"{p.label} {split}", f"eval_{split}.log", f"eval_{split}.done"))
        return evaluations

    def reports(self) -> List[list]:
        """The spec's `reports`, each a normformer-analyze command (its arguments), or with `each: scheme` one per
        scheme ({name}, {label} and the scheme's `vars` filled in): of the schemes `against` a baseline scheme (not
        itself, and only when it runs), or of those whose grid decides their best (`grid_only`)."""
        variables, commands = {**self.variables, "data": self.prefix()[len(launcher(self.setup))]}, []
        for report in self.spec.get("reports", []):
            if isinstance(report, list):
                commands.append(self.expand(filled(report, variables)))
                continue
            for name in self.reporting(report):
                scheme = self.spec["schemes"][name]
                named = {**variables, "name": name, "label": scheme.get("label", name), **scheme.get("vars", {})}
                commands.append(self.expand(filled(report["args"], named)))
        return [[str(BIN / "normformer-analyze"), *command] for command in commands]

    def reporting(self, report: dict) -> List[str]:
        """The schemes an `each: scheme` report is written for."""
        names, against = self.scheme_names(), report.get("against")
        if against is not None:
            return [name for name in names if name != against] if against in names else []
        return [name for name in names if not (report.get("grid_only") and "best" in self.spec["schemes"][name])]

    def expand(self, args: list) -> list:
        """``$runs``: ``--run LABEL=LOG`` of every training point (``$runs:grids``: of the grids; ``$runs:best``:
        each scheme at its best LR, every seed; ``$runs:variants``), a seed's run under its label again;
        ``$grid:NAME``: ``--run LR=LOG`` of scheme NAME's grid; ``$pairs:A,B``: ``--baseline LOG --candidate LOG``
        of run A's and run B's seed K (a variant, or a scheme at its best LR), for every seed."""
        out = []
        for arg in args:
            word, _, what = arg.partition(":")
            if word == "$runs":
                stages = {"grids": self.grid_points, "best": lambda: self.seed_points(grid_too=True), "variants": self.variant_points}
                points = stages[what]() if what else [p for p in self.points() if p.log_name == "train.log"]
                out += [a for p in points for a in ("--run", f"{p.label}={p.log}")]
            elif word == "$grid":
                out += [a for lr in self.lrs[what] for a in ("--run", f"{lr}={self.grid_dir(what, lr) / 'train.log'}")]
            elif word == "$pairs":
                baseline, candidate = what.split(",")
                for logs in zip(self.seed_logs(baseline), self.seed_logs(candidate)):
                    out += ["--baseline", str(logs[0]), "--candidate", str(logs[1])]
            else:
                out.append(arg)
        return out

    def seed_logs(self, name: str) -> List[Path]:
        """Every seed's train.log of run ``name``: a variant, or a scheme at its best LR."""
        if name in self.spec.get("variants", {}):
            run_dir = self.setup.out / name.format(**self.variables, lr=self.variant_lr(self.spec["variants"][name]))
        else:
            run_dir = self.grid_dir(name, self.best[name])
        return rd.seed_paths(run_dir / "train.log", self.setup.seed_count, is_run_dir=False)

    def manifest(self) -> dict:
        """What normformer-analyze sweep reads: the spec, the scale, the seeds, each scheme's LRs and best."""
        return {"spec": self.spec, "scale": self.setup.scale, "seeds": self.setup.seed_count,
                "lrs": self.lrs, "best": self.best, "variables": self.variables}  # fmt: skip


def point_line(point: Point) -> str:
    """The shell line of commands.sh: the command with its output in train.log."""
    return rd.command_line(list(point.command), point.log)


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
def run_local(points: List[Point], jobs: int, folder: Path, kept: Optional[Archive] = None) -> List[str]:
    """Each point as a submitit LocalExecutor job, ``jobs`` at a time (no time limit: a week), each settled one
    kept in ``kept`` as it ends; the errors of those that failed."""
    executor = submitit.LocalExecutor(folder)
    executor.update_parameters(timeout_min=7 * 24 * 60)
    pending, running, errors = list(points), {}, []
    while pending or running:
        while pending and len(running) < jobs:
            point = pending.pop(0)
            running[executor.submit(TrainJob(), point)] = point
        time.sleep(0.2)
        for job in [job for job in running if job.done()]:
            point = running.pop(job)
            if job.exception() is not None:
                errors.append(str(job.exception()).strip().splitlines()[-1])
            if kept is not None and point.finished:
                kept.update(point.run_dir)
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
    record = job_record(point)
    if not record.exists():
        return False
    state = submitit.SlurmJob(folder, record.read_text().strip()).state
    return state.split()[0] in ACTIVE_STATES


def job_record(point: Point) -> Path:
    """Where a point's job id is kept: RUN_DIR/slurm_job (an evaluation's: RUN_DIR/eval_SPLIT.slurm_job)."""
    return point.run_dir / (SLURM_JOB if point.marker == sweep_job.DONE else f"{Path(point.marker).stem}.{SLURM_JOB}")


def submit_slurm(points: List[Point], folder: Path, parameters: dict) -> List[str]:
    """The points as one array job; each point's job id in its run directory. The ids."""
    executor = slurm_executor(folder, parameters, points)
    jobs = executor.map_array(TrainJob(), points)
    for point, job in zip(points, jobs):
        point.run_dir.mkdir(parents=True, exist_ok=True)
        job_record(point).write_text(job.job_id + "\n")
    return [job.job_id for job in jobs]


def sbatch_script(folder: Path, parameters: dict, points: List[Point]) -> str:
    """The sbatch script submit_slurm would submit (submitit's), for a dry run."""
    from submitit.slurm.slurm import _make_sbatch_string

    listing = [f"# array task {i}: {point_line(p)}" for i, p in enumerate(points)]
    command = f"srun --unbuffered --output ... {shlex.quote(sys.executable)} -u -m submitit.core._submit {folder}"
    return _make_sbatch_string(command=command, folder=folder, map_count=len(points), setup=listing, **parameters)


# --- a sweep --------------------------------------------------------------------------------------------
def grids(setup: Setup) -> List[Grid]:
    """The grid of each sweep of the call (one per size with `each_size`), each with its manifest written in its
    directory (what normformer-analyze reads)."""
    import json

    found = [Grid(each) for each in setup.at_sizes()]
    for grid in found:
        grid.setup.out.mkdir(parents=True, exist_ok=True)
        (grid.setup.out / MANIFEST).write_text(json.dumps(grid.manifest(), indent=2, default=str) + "\n", encoding="utf-8")
    return found


def record(setup: Setup, points: List[Point]):
    """The corpus build (once) and each point's line, into REPORT_DIR/commands.sh; printed in a dry run."""
    lines = [rd.log_command(setup.reports, setup.built)] if setup.built and not (setup.reports / rd.COMMANDS).exists() else []
    lines += [rd.log_command(setup.reports, list(p.command), log=p.log) for p in points]
    if setup.dry_run:
        print("\n".join(lines))


def report(setup: Setup, grid: Grid):
    """The spec's reports (normformer-analyze), recorded in commands.sh and run (printed in a dry run)."""
    for command in grid.reports():
        line = rd.log_command(setup.reports, command)
        if setup.dry_run:
            print(line)
        else:
            subprocess.run(command, check=True)


def archive_of(setup: Setup) -> Optional[Archive]:
    """--archive (not in a dry run): the archive of the sweep's corpus, its runs restored into --out, then each settled
    run of --out kept there (those a call without --archive trained)."""
    if setup.archive is None or setup.dry_run:
        return None
    if setup.remote_data:
        raise SpecError("--archive names runs by the corpus they trained on, which --remote-data leaves unread here")
    if setup.archive.exists() and not setup.archive.is_dir():
        raise SpecError(f"--archive {setup.archive}: not a directory")
    kept = Archive(setup.archive, corpus_id(data_dir(setup)), setup.out)
    print(f"normformer-sweep: {kept.restore()} runs restored from {kept.root / kept.corpus}", file=sys.stderr)
    for marker in (sweep_job.DONE, sweep_job.DIVERGED):
        for run_dir in sorted(path.parent for path in setup.out.rglob(marker)):
            kept.update(run_dir)
    return kept


def sweep_local(setup: Setup, jobs: int):
    """Run the sweep's points on this machine until none is left; widened grids and the points that wait for a
    grid's best start as soon as their grid is settled. With --archive, its runs first, and each settled run kept."""
    kept = archive_of(setup)
    while True:
        found = grids(setup)
        points = [p for grid in found for p in grid.points()]
        todo = [p for p in points if not p.finished]
        if not todo or setup.dry_run:
            record(setup, todo)
            print(f"normformer-sweep: {len(points) - len(todo)} points done, {len(todo)} to run", file=sys.stderr)
            for grid in found:
                report(setup, grid)
            return
        record(setup, todo)
        errors = run_local(todo, jobs, setup.out / "submitit", kept)
        if errors:
            raise RuntimeError(f"{len(errors)} points failed; the first: {errors[0]}")


def sweep_slurm(setup: Setup, parameters: dict):
    """Submit, as one SLURM array, the points that can start now and are neither done nor queued; once every point
    is done, write the spec's reports. With --archive, its runs first, and each settled run kept."""
    archive_of(setup)
    found, folder = grids(setup), setup.out / "slurm"
    points = [p for grid in found for p in grid.points()]
    todo = [p for p in points if not p.finished and (setup.dry_run or not queued(p, folder))]
    if setup.dry_run:
        print(sbatch_script(folder, parameters, todo))
        record(setup, todo)
        return
    if not todo:
        print("normformer-sweep: nothing to submit (every point is done or queued)", file=sys.stderr)
        if all(p.finished for p in points):
            for grid in found:
                report(setup, grid)
        return
    record(setup, todo)
    ids = submit_slurm(todo, folder, parameters)
    print(f"normformer-sweep: submitted {len(ids)} points as array job {ids[0].split('_')[0]}", file=sys.stderr)
