"""normformer-sweep: a recipe's grid (recipes/sweeps/*.yaml) as jobs, on this machine or on SLURM (docs/cluster.md).

    normformer-sweep recipes/sweeps/norm_bench.yaml --scale small --executor local --jobs 2
    normformer-sweep recipes/sweeps/norm_bench.yaml --data DATA_BIN --size 125M --gpus-per-node 8 \\
        --executor slurm --partition learn --time 4320 --out work/sweeps/norm_bench-125M
    normformer-sweep recipes/sweeps/norm_bench.yaml --scale small --dry-run     # commands, nothing run
    normformer-sweep recipes/sweeps/mlm_small.yaml --set precision=fp32 -- --no-layernorm-embedding  # every point's

A rerun runs (submits) only the points that are neither done nor queued; it continues a grid that the runs so
far decided (a widened LR grid, the seeds at a scheme's best LR).
"""
import argparse
import sys
from pathlib import Path

from fairseq_normformer import paper
from fairseq_normformer.runs import sweep

EXIT_BAD_INPUT = 2


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="normformer-sweep", description=__doc__.split("\n\n")[0],
                                epilog="After `--`: fairseq-train arguments added to every point's shared ones.")
    p.add_argument("spec", help="a sweep spec, e.g. recipes/sweeps/norm_bench.yaml")
    where = p.add_argument_group("what to train")
    where.add_argument("--scale", help="one of the spec's CPU scales (tiny, small); default: its first")
    where.add_argument("--data", type=Path, help="a fairseq-preprocess directory to train on (default: the scale's corpus)")
    where.add_argument("--size", choices=list(paper.SIZES), help="a paper size: the paper's model, batch and schedule "
                       "on --gpus-per-node x --nodes GPUs, backend from the memory plan (needs --data)")
    where.add_argument("--gpu-memory", type=float, default=32.0, help="GB per GPU, for the memory plan (default: 32)")
    where.add_argument("--seeds", type=positive, help="seeds at each best LR (default: the spec's)")
    where.add_argument("--updates", type=positive, help="each run's length (default: the spec's, or the paper's with --size)")
    where.add_argument("--stability-peak-lr", type=float, help="the stability tests' peak LR (default: the spec's)")
    where.add_argument("--stability-warmup-updates", type=positive,
                       help="the stability tests' warmup to the peak LR, in updates (default: the spec's)")
    where.add_argument("--world-size", type=positive, help="with --size: GPUs of one node that one fairseq-train spawns a "
                       "process for each, as the recipes' paper scale (default: --gpus-per-node x --nodes, through torchrun)")
    where.add_argument("--batch-size", type=positive, help="with --size: sequences per GPU (default: the paper's)")
    where.add_argument("--tokens-per-sample", type=positive, default=paper.TOKENS_PER_SAMPLE,
                       help=f"with --size: the sequence length, which sets --update-freq (default: {paper.TOKENS_PER_SAMPLE})")
    where.add_argument("--remote-data", action="store_true",
                       help="--data is a path of the machines that run the points: not checked here")
    where.add_argument("--schemes", nargs="+", metavar="NAME", help="the spec's schemes to run (default: all)")
    where.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="a variable of the spec's strings, over the spec's and the scale's (e.g. an LR grid)")
    where.add_argument("--out", type=Path, help="the sweep's directory (default: work/recipes/NAME-SCALE)")
    where.add_argument("--report-dir", type=Path, help="where commands.sh and the spec's reports go (default: --out)")
    where.add_argument("--archive", type=Path, metavar="DIR",
                       help="keep each settled run there without its checkpoints (DIR/CORPUS/RUN.tar.xz), and first "
                       "restore the runs it holds of this sweep's corpus: a study continues on another machine")
    how = p.add_argument_group("how to run it")
    how.add_argument("--executor", choices=("local", "slurm"), default="local",
                     help="local: submitit jobs on this machine (default); slurm: one SLURM array through submitit")
    how.add_argument("--jobs", type=positive, default=1, help="local: points at a time (default: 1)")
    how.add_argument("--dry-run", action="store_true", help="print each point's command (slurm: and the sbatch script)")
    how.add_argument("--partition", help="slurm partition (default: the spec's)")
    how.add_argument("--gpus-per-node", type=positive, help="GPUs per point and node (default: the spec's, else 1)")
    how.add_argument("--nodes", type=positive, help="nodes per point (default: the spec's, else 1)")
    how.add_argument("--time", type=positive, help="slurm: minutes per job before it is signalled and requeued")
    how.add_argument("--array-parallelism", type=positive, help="slurm: array tasks running at once")
    how.add_argument("--signal-delay-s", type=positive, help=f"slurm: seconds before the time limit the job is signalled (default: {sweep.SIGNAL_DELAY_S})")
    return p


def setup_of(args, spec: dict) -> sweep.Setup:
    scales = list(spec.get("scales", {}))
    scale = args.scale or (args.size and f"size-{args.size}") or (scales[0] if scales else None)
    if not args.size and scale not in scales:
        raise sweep.SpecError(f"--scale {scale}: the spec's scales are {', '.join(scales) or 'none'} (or give --size)")
    unknown = [name for name in args.schemes or [] if name not in spec["schemes"]]
    if unknown:
        raise sweep.SpecError(f"--schemes: unknown scheme {unknown[0]!r} (known: {', '.join(spec['schemes'])})")
    slurm = spec.get("slurm", {})
    default_out = Path("work") / "recipes" / f"{spec.get('name', Path(args.spec).stem)}-{scale}"
    return sweep.Setup(
        spec, scale, (args.out or sweep.REPO / default_out).resolve(), args.data and args.data.resolve(),
        args.size or spec.get("scales", {}).get(scale, {}).get("size"),
        args.gpus_per_node or slurm.get("gpus_per_node") or 1, args.nodes or slurm.get("nodes") or 1,
        args.gpu_memory, args.seeds, args.updates, args.dry_run, stability_overrides(args), overrides=variables(args.set),
        report_dir=args.report_dir and args.report_dir.resolve(), spawn=args.world_size, batch_size=args.batch_size,
        tokens_per_sample=args.tokens_per_sample, remote_data=args.remote_data, schemes=args.schemes, extra=args.extra,
        archive=args.archive and args.archive.resolve(),
    )  # fmt: skip


def variables(assignments: list) -> dict:
    """--set NAME=VALUE, each."""
    if any("=" not in a for a in assignments):
        raise sweep.SpecError(f"--set: expected NAME=VALUE, got {next(a for a in assignments if '=' not in a)!r}")
    return dict(a.split("=", 1) for a in assignments)


def stability_overrides(args) -> dict:
    """--stability-peak-lr and --stability-warmup-updates, where given, as the spec's `stability` keys."""
    given = {"peak_lr": args.stability_peak_lr, "warmup_updates": args.stability_warmup_updates}
    return {key: value for key, value in given.items() if value is not None}


def parse_args(argv) -> argparse.Namespace:
    """The options, and after `--` the fairseq-train arguments every point adds (args.extra)."""
    argv = sys.argv[1:] if argv is None else list(map(str, argv))
    cut = argv.index("--") if "--" in argv else len(argv)
    args = get_parser().parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        spec = sweep.load_spec(args.spec)
        setup = setup_of(args, spec)
        if args.executor == "local":
            sweep.sweep_local(setup, args.jobs)
        else:
            flags = {"partition": args.partition, "time": args.time, "array_parallelism": args.array_parallelism,
                     "signal_delay_s": args.signal_delay_s, "gpus_per_node": setup.gpus_per_node, "nodes": setup.nodes}
            sweep.sweep_slurm(setup, sweep.slurm_parameters(spec, flags))
    except sweep.SpecError as e:
        print(f"normformer-sweep: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except (OSError, RuntimeError, ValueError) as e:
        sys.exit(f"normformer-sweep: error: {e}")
    except KeyboardInterrupt:
        sys.exit("normformer-sweep: interrupted: run the same command to continue (finished points are kept)")


if __name__ == "__main__":
    main()
