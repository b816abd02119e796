"""The paper's training settings, written once (Shleifer, Weston, Ott 2021, and the authors' commands in
fairseq's examples/normformer/{README.md,train_lm.sh}). Every recipe and launch script reads them here,
through ``normformer-paper-settings`` (see docs/recipes.md)::

    normformer-paper-settings --table 6 --size 125M --model normformer --world-size 16 --format json

Model shapes stay in ``memory_plan.py`` (``GPT3_SIZES``, the presets' shapes); this module names them by size.
BERT's pre-training settings (Devlin et al. 2019), which the BERT recipes follow, are in ``BERT``::

    normformer-paper-settings --bert --format shell

and the memory each GPU needs to train a size (``memory_plan.py``, docs/distributed.md#memory-plan)::

    normformer-paper-settings --memory --size 1.3B --model normformer --world-size 8 --gpu-memory 32
    normformer-paper-settings --memory-table      # docs/distributed.md's table, every size

and one training step of a size traced on the meta device (``meta_trace.py``, docs/distributed.md#traced-against-planned)::

    normformer-paper-settings --trace --size 2.7B --model normformer [--checkpoint-activations]
"""
import argparse
import json
import logging
import shlex
import sys

from . import memory_plan
from .memory_plan import GPT3_SIZES

# size -> preset suffix: preln_lm_<suffix> (baseline) and normformer_lm_<suffix> (NormFormer)
SIZES = {"125M": "gpt3_small", "355M": "gpt3_medium", "760M": "gpt3_large", "1.3B": "gpt3_xl", "2.7B": "gpt3_2_7"}
assert set(SIZES.values()) == set(GPT3_SIZES)
PRESET_SIZES = {preset: size for size, preset in SIZES.items()}  # gpt3_small -> 125M
MODELS = {"baseline": "preln_lm", "normformer": "normformer_lm"}

# GPT-3's batch: 0.5M tokens per update for 125M and 355M, 1M above, 300B tokens in all (the authors'
# train_lm.sh: 8 GPUs x 16 x 2048 x 2 and 8 x 4 x 2048 x 16; 572,204 and 286,102 updates).
TOKENS_PER_UPDATE = {"125M": 2**19, "355M": 2**19, "760M": 2**20, "1.3B": 2**20, "2.7B": 2**20}
BATCH_SIZE = {"125M": 16, "355M": 16, "760M": 4, "1.3B": 4, "2.7B": 4}  # sequences per GPU (train_lm.sh)
TOKENS_PER_SAMPLE = 2048
TOTAL_TOKENS = 300 * 10**9

# Optimisation and regularisation (train_lm.sh): Adam, polynomial decay after 750 warmup updates.
ADAM_BETAS = (0.9, 0.98)
ADAM_EPS = 1e-8
WEIGHT_DECAY = 0.01
CLIP_NORM = 0.0
WARMUP_UPDATES = 750
DROPOUT = {"355M": 0.0}  # train_355M sets dropout and attention dropout 0; every other size 0.1
DEFAULT_DROPOUT = 0.1
PRECISION = ("--memory-efficient-fp16", "--fp16-init-scale", "4")  # fp16 on GPUs, as the authors
# Fully sharded (FSDP, for models that do not fit one GPU): fairscale cannot wrap fairseq's fp32-built model for
# --memory-efficient-fp16 (checks.py refuses the pair); under FSDP --fp16 keeps only fp32 shards and trains with
# fairseq's memory-efficient fp16 optimizer (docs/distributed.md, "Fully sharded training").
FSDP_FP16 = ("--fp16", "--fp16-init-scale", "4")  # fully_sharded refuses --memory-efficient-fp16 (checks.py)
FULLY_SHARDED_PRECISION = ("--ddp-backend", "fully_sharded", *FSDP_FP16)

# Learning rates. GPT-3 replicated (baseline) and NormFormer: the authors' README commands, the models of
# Tables 1 and 6 (both tables report the same runs). Where recipes disagreed (355M baseline 1e-3 in the
# Table 1 recipe), Table 6's "GPT-3 replicated" 6e-4 is the paper's value. 760M: GPT-3's Table 2.1 LR;
# the paper trained no 760M NormFormer.
GPT3_LR = {"125M": 6e-4, "355M": 6e-4, "760M": 2.5e-4, "1.3B": 2e-4, "2.7B": 1.6e-4}
HIGH_LR_BASELINE = {"125M": 1e-3, "355M": 1e-3, "1.3B": 6e-4}  # the authors' "stronger high-lr baseline"
NORMFORMER_LR = {"125M": 3e-3, "355M": 1e-3, "1.3B": 6e-4, "2.7B": 6e-4}

# Per table: {size: {model: learning rates}} (several: a grid, one run each), and any other override.
TABLES = {
    # Table 1 (zero-shot) and Table 6 (sizes): the four sizes, each model at its own best LR
    "1": {"sizes": {s: {"baseline": (GPT3_LR[s],), "normformer": (NORMFORMER_LR[s],)} for s in NORMFORMER_LR}},
    "6": {"sizes": {s: {"baseline": (GPT3_LR[s],), "normformer": (NORMFORMER_LR[s],)} for s in NORMFORMER_LR}},
    # Table 3 (LR stability): warmup to a very large peak; the schedule is this package's choice (the
    # paper's text does not give it)
    "3": {"sizes": {"125M": {"baseline": (0.05,), "normformer": (0.05,)}}, "warmup_updates": 10000},
    # Table 5 (ablations) and Figures 2-5 (the baseline/NormFormer pair): 125M, the stronger baseline
    "5": {"sizes": {"125M": {"baseline": (HIGH_LR_BASELINE["125M"],), "normformer": (NORMFORMER_LR["125M"],)}}},
    "figs": {"sizes": {"125M": {"baseline": (HIGH_LR_BASELINE["125M"],), "normformer": (NORMFORMER_LR["125M"],)}}},
    # Table 7 (learning rates): 125M, both baselines and NormFormer at 1e-3 and 3e-3
    "7": {"sizes": {"125M": {"baseline": (GPT3_LR["125M"], HIGH_LR_BASELINE["125M"]), "normformer": (1e-3, 3e-3)}}},
}


# Xiong et al. 2020 ("On Layer Normalization in the Transformer Architecture"), IWSLT14 De-En (Sec. 4.1):
# 6+6 layers, d 512, FFN 1024, 4 heads; Adam (0.9, 0.98), label smoothing 0.1, dropout 0.1, 4096 tokens a
# batch; Post-LN with inverse-sqrt warmup over 4000 updates at lr_max 5e-4; the warmup-free runs keep lr_max
# through the first epoch and then lr_max / sqrt(epoch) (our reading of Sec. 4.1: --decay-per epoch); BLEU
# with beam 5, length penalty 1.2. run name -> (model, lr, warmup updates, --decay-per)
XIONG_RUNS = {
    "postln_warmup": ("postln", 5e-4, 4000, "update"),
    "postln_no_warmup": ("postln", 5e-4, 0, "epoch"),
    "preln_no_warmup": ("preln", 5e-4, 0, "epoch"),
    "normformer_no_warmup": ("normformer", 5e-4, 0, "epoch"),
}
XIONG_TRAIN = ("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "0.0",
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--dropout", "0.1",
               "--max-tokens", "4096", "--lr-scheduler", "inverse_sqrt_any_warmup")  # fmt: skip
XIONG_BEAM = ("--beam", "5", "--lenpen", "1.2")


def xiong_shell_lines(preset_suffix: str = "iwslt_de_en") -> list:
    """bash assignments (for ``eval``) of Xiong et al.'s warmup study: XIONG_RUNS (names in order),
    XIONG_ARCH/LR/WARMUP/DECAY keyed by run name, XIONG_TRAIN and XIONG_BEAM."""
    keyed = {
        "ARCH": {run: f"{model}_transformer_{preset_suffix}" for run, (model, *_) in XIONG_RUNS.items()},
        "LR": {run: lr_text(lr) for run, (_, lr, _, _) in XIONG_RUNS.items()},
        "WARMUP": {run: str(warmup) for run, (_, _, warmup, _) in XIONG_RUNS.items()},
        "DECAY": {run: decay for run, (*_, decay) in XIONG_RUNS.items()},
    }
    lines = [f"XIONG_RUNS=({' '.join(XIONG_RUNS)})", f"XIONG_TRAIN=({shlex.join(XIONG_TRAIN)})",
             f"XIONG_BEAM=({shlex.join(XIONG_BEAM)})"]  # fmt: skip
    for name, by_run in keyed.items():
        lines.append(f"declare -gA XIONG_{name}=({' '.join(f'[{k}]={shlex.quote(v)}' for k, v in by_run.items())})")
    return lines


# BERT (Devlin et al. 2019, Appendix A.2): BERT-base, 256 sequences per update for 1M updates, Adam
# (0.9, 0.999) at 1e-4, weight decay 0.01, 10k warmup updates then linear decay, dropout 0.1, 15% masked.
# Its length schedule: 90% of the updates at 128 tokens, the last 10% at 512 "to learn the positional
# embeddings". Table 5's ablations (MLM+NSP, No NSP, LTR & No NSP) share data, budget and fine-tuning.
BERT = {
    "arch": "postln_bert_base", "batch_size": 256, "max_update": 1_000_000, "lr": 1e-4,
    "adam_betas": (0.9, 0.999), "adam_eps": 1e-6, "weight_decay": 0.01, "warmup_updates": 10_000,
    "dropout": 0.1, "mask_prob": 0.15, "short_seq_prob": 0.1,
    "phase1_percent": 90, "phase1_tokens": 128, "phase2_tokens": 512,
    "finetune_lrs": (5e-5, 3e-5, 2e-5), "finetune_batch_size": 32, "finetune_epochs": 3,
}  # fmt: skip


def bert_shell_lines() -> list:
    """bash assignments BERT_<NAME>=value (tuples as space-separated words), for ``eval``."""
    words = lambda v: " ".join(map(str, v)) if isinstance(v, tuple) else str(v)  # noqa: E731
    lines = [f"BERT_{name.upper()}={shlex.quote(words(value))}" for name, value in BERT.items()]
    optimizer = ["--optimizer", "adam", "--adam-betas", str(BERT["adam_betas"]), "--adam-eps", str(BERT["adam_eps"]),
                 "--weight-decay", str(BERT["weight_decay"])]  # fmt: skip
    return lines + [f"BERT_OPTIMIZER=({shlex.join(optimizer)})"]


def update_freq(tokens_per_update: int, world_size: int, batch_size: int, tokens_per_sample: int) -> int:
    """--update-freq such that world size x --batch-size x --tokens-per-sample x --update-freq equals
    the tokens per update exactly; an error when no whole number does."""
    for name, value in (("world size", world_size), ("batch size", batch_size), ("tokens per sample", tokens_per_sample)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    per_pass = world_size * batch_size * tokens_per_sample
    if tokens_per_update % per_pass:
        raise ValueError(
            f"{memory_plan.gpus_text(world_size)} x --batch-size {batch_size} x {tokens_per_sample} tokens does not divide "
            f"{tokens_per_update} tokens per update: change the batch size or the number of GPUs"
        )
    return tokens_per_update // per_pass


def settings(table: str, size: str, model: str, world_size: int, batch_size=None,
             tokens_per_sample: int = TOKENS_PER_SAMPLE, fully_sharded: bool = False) -> dict:  # fmt: skip
    """Every setting of one run of ``table``: the model, LRs, batch arithmetic, optimiser, precision
    (with ``fully_sharded``: FSDP's precision and backend)."""
    size = PRESET_SIZES.get(size, size)
    if table not in TABLES:
        raise ValueError(f"no settings for table {table!r}; one of {', '.join(TABLES)}")
    sizes = TABLES[table]["sizes"]
    if size not in sizes:
        raise ValueError(f"table {table} has no {size} run; its sizes: {', '.join(sizes)}")
    return {
        "table": table, **size_settings(size, model, world_size, batch_size, tokens_per_sample, fully_sharded),
        "lrs": list(sizes[size][model]), "warmup_updates": TABLES[table].get("warmup_updates", WARMUP_UPDATES),
    }  # fmt: skip


def size_settings(size: str, model: str, world_size: int, batch_size=None, tokens_per_sample: int = TOKENS_PER_SAMPLE,
                  fully_sharded: bool = False) -> dict:  # fmt: skip
    """The settings of a size that no table changes (every size, 760M too): the model, batch
    arithmetic, optimiser, precision."""
    size = PRESET_SIZES.get(size, size)
    batch_size = batch_size or BATCH_SIZE[size]
    freq = update_freq(TOKENS_PER_UPDATE[size], world_size, batch_size, tokens_per_sample)
    return {
        "size": size, "model": model, "arch": f"{MODELS[model]}_{SIZES[size]}", "dropout": DROPOUT.get(size, DEFAULT_DROPOUT),
        "adam_betas": list(ADAM_BETAS), "adam_eps": ADAM_EPS, "weight_decay": WEIGHT_DECAY, "clip_norm": CLIP_NORM,
        "tokens_per_sample": tokens_per_sample, "tokens_per_update": TOKENS_PER_UPDATE[size],
        "world_size": world_size, "batch_size": batch_size, "update_freq": freq,
        "max_update": TOTAL_TOKENS // TOKENS_PER_UPDATE[size], "precision": list(FULLY_SHARDED_PRECISION if fully_sharded else PRECISION),
    }  # fmt: skip


def lr_text(lr: float) -> str:
    """A learning rate as the paper writes it: 6e-4, 1.6e-4."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def optimizer_args() -> list:
    """The paper's Adam as fairseq-train arguments (the tiny recipes use it too)."""
    return ["--optimizer", "adam", "--adam-betas", str(ADAM_BETAS), "--adam-eps", str(ADAM_EPS),
            "--weight-decay", str(WEIGHT_DECAY), "--clip-norm", str(CLIP_NORM)]  # fmt: skip


def run_args(s: dict) -> dict:
    """fairseq-train arguments of one ``settings`` result, in three groups; --lr is the caller's."""
    dropout, updates = str(s["dropout"]), str(s["max_update"])
    return {
        "MODEL": ["--arch", s["arch"], "--dropout", dropout, "--attention-dropout", dropout],
        "BATCH": ["--tokens-per-sample", str(s["tokens_per_sample"]), "--batch-size", str(s["batch_size"]),
                  "--update-freq", str(s["update_freq"]), "--distributed-world-size", str(s["world_size"])],
        "SCHEDULE": ["--lr-scheduler", "polynomial_decay", "--warmup-updates", str(s["warmup_updates"]),
                     "--total-num-update", updates, "--max-update", updates],
    }  # fmt: skip


def shell_lines(runs: list) -> list:
    """bash assignments (for ``eval``): PAPER_* arrays keyed by "SIZE/MODEL", and the shared flags."""
    lines = [f"PAPER_OPTIMIZER=({shlex.join(optimizer_args())})", f"PAPER_PRECISION=({shlex.join(runs[0]['precision'])})",
             f"PAPER_SIZES=({' '.join(dict.fromkeys(s['size'] for s in runs))})"]  # fmt: skip
    columns = {"ARCH": "arch", "DROPOUT": "dropout", "WARMUP": "warmup_updates", "UPDATE_FREQ": "update_freq",
               "TOKENS_PER_UPDATE": "tokens_per_update", "MAX_UPDATE": "max_update", "BATCH_SIZE": "batch_size"}  # fmt: skip
    keyed = {name: {f"{s['size']}/{s['model']}": str(s[column]) for s in runs} for name, column in columns.items()}
    if "memory_args" in runs[0]:
        keyed["MEMORY_ARGS"] = {f"{s['size']}/{s['model']}": shlex.join(s["memory_args"]) for s in runs}
    keyed["PRECISION_ARGS"] = {f"{s['size']}/{s['model']}": shlex.join(s["precision"]) for s in runs}
    keyed["LRS"] = {f"{s['size']}/{s['model']}": " ".join(map(lr_text, s["lrs"])) for s in runs}
    for group in ("MODEL", "BATCH", "SCHEDULE"):
        keyed[f"{group}_ARGS"] = {f"{s['size']}/{s['model']}": shlex.join(run_args(s)[group]) for s in runs}
    for name, by_key in keyed.items():
        items = " ".join(f"[{k}]={shlex.quote(v)}" for k, v in by_key.items())
        lines.append(f"declare -gA PAPER_{name}=({items})")
    return lines


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="normformer-paper-settings", description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--table", choices=[*TABLES, "xiong"],
                       help="paper table ('figs': Figures 2-5; 'xiong': Xiong et al.'s warmup study, shell format)")
    which.add_argument("--bert", action="store_true", help="BERT's pre-training settings (the BERT recipes)")
    which.add_argument("--memory", action="store_true",
                       help="bytes per GPU of each --size and --model (default: every size, both models), and the GPUs it fits")
    which.add_argument("--memory-table", action="store_true",
                       help="docs/distributed.md's memory table: each --size (default: all) of the first --model (default: "
                            "normformer), and the backend --backend auto picks on each GPU")
    which.add_argument("--trace", action="store_true",
                       help="one training step of each --size and --model (default: every size, both) on the meta device, "
                            "fp16 at the plan's batch: parameters, FLOPs per token counted and by formula, bytes saved "
                            "for backward against the memory plan's (JSON)")
    which.add_argument("--trace-table", choices=("memory", "flops"),
                       help="--trace of each --size (default: all) and both models as docs/distributed.md's table "
                            "(memory: traced against planned activations) or docs/model.md's (flops: NormFormer's overhead)")
    p.add_argument("--size", action="append", choices=[*SIZES, *PRESET_SIZES],
                   help="125M or gpt3_small, ...; repeatable; default: the table's sizes")
    p.add_argument("--model", action="append", choices=list(MODELS), help="repeatable; default: both")
    p.add_argument("--world-size", type=int, default=8, help="GPUs (processes) in all")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per GPU and pass (default: the authors')")
    p.add_argument("--tokens-per-sample", type=int, default=TOKENS_PER_SAMPLE,
                   help=f"sequence length, which sets --update-freq for the paper's tokens per update (default: {TOKENS_PER_SAMPLE})")
    p.add_argument("--fully-sharded", action="store_true",
                   help="train with --ddp-backend fully_sharded (FSDP): --fp16 in place of --memory-efficient-fp16")
    p.add_argument("--format", choices=("json", "shell"), default="json",
                   help="json: the settings as JSON; shell: bash assignments (PAPER_* arrays) the recipes eval; "
                   "with --memory: text by default, shell prints MEMORY_ARGS=(...) and the text on stderr")
    memory = p.add_argument_group("memory plan", "with --memory, or with --table and --gpu-memory: "
                                  "PAPER_MEMORY_ARGS (the backend that fits), the arithmetic on stderr")
    memory.add_argument("--precision", choices=list(memory_plan.PRECISIONS), default="memory-efficient-fp16",
                        help="fp16 and bf16 keep fp32 master weights (default: the paper's)")
    memory.add_argument("--backend", choices=[*memory_plan.BACKEND_ARGS, "auto"], default=None,
                        help="default: auto with --gpu-memory, else c10d. auto: the first backend that fits "
                             "--gpu-memory, then each with --checkpoint-activations")
    memory.add_argument("--gpu-memory", type=float, default=None, help="GB per GPU; needed by --backend auto")
    memory.add_argument("--checkpoint-activations", action="store_true",
                        help="count activations as fairseq's --checkpoint-activations keeps them (layer inputs only); "
                             "with --trace: trace the step with it")
    return p


def memory_plan_of(s: dict, args) -> memory_plan.Plan:
    """The memory plan of one ``settings`` run: ``--backend`` as given, or with ``auto`` the first
    that fits ``--gpu-memory``; a ValueError when it does not fit."""
    dropout = s["dropout"] > 0
    common = (s["arch"], args.precision)
    if args.backend == "auto":
        if args.gpu_memory is None:
            raise ValueError("--backend auto needs --gpu-memory")
        return memory_plan.auto_plan(*common, s["world_size"], s["batch_size"], s["tokens_per_sample"],
                                     args.gpu_memory, dropout)  # fmt: skip
    p = memory_plan.plan(*common, args.backend, s["world_size"], s["batch_size"], s["tokens_per_sample"],
                         args.checkpoint_activations, dropout)  # fmt: skip
    if args.gpu_memory is not None and not p.fits(args.gpu_memory):
        raise ValueError(f"{s['arch']} with {args.backend} needs {p.total / memory_plan.GIB:.1f} GiB per GPU and "
                         f"{args.gpu_memory:g} GB GPUs hold {args.gpu_memory - 1:g}: try --backend auto")  # fmt: skip
    return p


def with_plan(s: dict, p: memory_plan.Plan):
    """The plan's fairseq-train arguments into ``settings`` run ``s`` (FSDP's precision under FSDP)."""
    s["memory_args"] = p.fairseq_args()
    if p.backend.startswith("fsdp"):
        s["precision"] = list(FSDP_FP16)


def memory_main(args, runs: list):
    """--memory: the plan of each run as text, or with --format shell MEMORY_ARGS=(...) of one run;
    --memory-table: docs/distributed.md's table of the runs of one model."""
    if args.memory_table:
        model = (args.model or ["normformer"])[0]
        rows = [(s["size"], s["arch"], s["batch_size"], s["dropout"] > 0) for s in runs if s["model"] == model]
        print("\n".join(memory_plan.table_lines(rows, args.precision, args.world_size, args.tokens_per_sample)))
        return
    plans = [memory_plan_of(s, args) for s in runs]
    report = "\n".join(line for p in plans for line in memory_plan.report_lines(p))
    if args.format != "shell":
        print(report)
        return
    if len(plans) != 1:
        raise ValueError("--memory --format shell needs one --size and one --model")
    print(report, file=sys.stderr)
    print(f"MEMORY_ARGS=({shlex.join(plans[0].fairseq_args())})")


def trace_report(s: dict, checkpoint_activations: bool) -> dict:
    """--trace of one ``size_settings`` run: what the meta-device step counted, beside the formulas."""
    from . import meta_trace, register  # torch and fairseq: here, so that the settings the recipes read import neither

    register()  # the presets it builds
    shape, seq_len = memory_plan.ModelShape.gpt3(s["arch"]), s["tokens_per_sample"]
    step = meta_trace.lm_step(s["arch"], s["batch_size"], seq_len, s["dropout"], checkpoint_activations, shape.vocab)
    planned = memory_plan.plan(s["arch"], "memory-efficient-fp16", "c10d", s["world_size"], s["batch_size"], seq_len,
                               checkpoint_activations, s["dropout"] > 0)  # fmt: skip
    tokens = s["batch_size"] * seq_len
    return {
        "size": s["size"], "model": s["model"], "arch": s["arch"], "batch_size": s["batch_size"],
        "tokens_per_sample": seq_len, "dropout": s["dropout"], "checkpoint_activations": checkpoint_activations,
        "parameters": step.parameters, "flops_per_token": step.flops // tokens,
        "flops_per_token_formula": memory_plan.flops_per_token(shape, seq_len, checkpoint_activations),
        "layer_norm_flops_per_token": step.layer_norm_flops // tokens,
        # backward runs a layer at a time: what it saves (recomputed layers, the torch FFN LN's GELU) once
        "saved_activation_bytes": step.saved_forward_bytes + step.saved_backward_bytes // shape.layers,
        "saved_at_end_of_forward_bytes": step.saved_forward_bytes,
        "planned_activation_bytes": planned.bytes["activations"],
    }  # fmt: skip


def trace_table_lines(which: str, sizes: list, world_size: int) -> list:
    """--trace-table memory: traced against planned activations (GiB), without and with
    --checkpoint-activations; flops: NormFormer's FLOPs per token over Pre-LN's."""
    runs = {(size, model): size_settings(size, model, world_size) for size in sizes for model in MODELS}
    if which == "flops":
        return flop_overhead_lines({key: trace_report(s, False) for key, s in runs.items()}, sizes)
    header = ["size", "model", "--batch-size", "activations: traced", "planned", "difference",
              "checkpointed: traced", "planned", "difference"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (size, model), s in runs.items():
        cells = [size, model, str(s["batch_size"])]
        for checkpoint in (False, True):
            r = trace_report(s, checkpoint)
            traced, planned = r["saved_activation_bytes"], r["planned_activation_bytes"]
            cells += [memory_plan.gib_text(traced), memory_plan.gib_text(planned), f"{traced / planned - 1:+.1%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def flop_overhead_lines(reports: dict, sizes: list) -> list:
    """NormFormer - Pre-LN per token: matrix products and attention (torch's count), LayerNorms, parameters."""
    header = ["size", "Pre-LN GFLOP/token (counted)", "formula", "NormFormer - Pre-LN: products",
              "LayerNorm FLOPs", "FLOPs in all", "parameters"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for size in sizes:
        base, norm = reports[(size, "baseline")], reports[(size, "normformer")]
        total = {r["model"]: r["flops_per_token"] + r["layer_norm_flops_per_token"] for r in (base, norm)}
        extra_norms = norm["layer_norm_flops_per_token"] - base["layer_norm_flops_per_token"]
        cells = [size, f"{base['flops_per_token'] / 1e9:.3f}", f"{base['flops_per_token_formula'] / 1e9:.3f}",
                 f"{norm['flops_per_token'] - base['flops_per_token']:+,}", f"{extra_norms:+,}",
                 f"{total['normformer'] / total['baseline'] - 1:+.3%}",
                 f"{norm['parameters'] / base['parameters'] - 1:+.3%}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def trace_main(args):
    """--trace: a JSON list, a report per run; --trace-table: a markdown table."""
    if args.format == "shell":
        raise ValueError("--trace prints JSON: leave out --format shell")
    sizes = [PRESET_SIZES.get(size, size) for size in args.size or SIZES]
    logging.disable(logging.INFO)  # fairseq's and hydra's log lines of each model built
    try:
        if args.trace_table:
            print("\n".join(trace_table_lines(args.trace_table, sizes, args.world_size)))
            return
        runs = [size_settings(size, model, args.world_size, args.batch_size, args.tokens_per_sample)
                for size in sizes for model in (args.model or list(MODELS))]  # fmt: skip
        print(json.dumps([trace_report(s, args.checkpoint_activations) for s in runs], indent=2))
    finally:
        logging.disable(logging.NOTSET)


def main(argv=None):
    args = get_parser().parse_args(argv)
    args.backend = args.backend or ("auto" if args.gpu_memory is not None else "c10d")
    if args.table == "xiong":
        print("\n".join(xiong_shell_lines()))
        return
    if args.bert:
        print("\n".join(bert_shell_lines()) if args.format == "shell" else json.dumps(BERT, indent=2))
        return
    try:
        if args.trace or args.trace_table:
            return trace_main(args)
        if args.memory or args.memory_table:  # every size: the plan needs no table's LRs
            runs = [size_settings(size, model, args.world_size, args.batch_size, args.tokens_per_sample)
                    for size in args.size or SIZES for model in (args.model or list(MODELS))]  # fmt: skip
            return memory_main(args, runs)
        runs = [settings(args.table, size, model, args.world_size, args.batch_size, args.tokens_per_sample,
                         args.fully_sharded)
                for size in args.size or TABLES[args.table]["sizes"] for model in (args.model or list(MODELS))]  # fmt: skip
        plans = [memory_plan_of(s, args) for s in runs] if args.gpu_memory is not None else []
    except ValueError as e:
        sys.exit(f"normformer-paper-settings: error: {e}")
    for p in plans:  # the arithmetic, for the launch scripts' logs
        print("\n".join(memory_plan.report_lines(p)), file=sys.stderr)
    for s, p in zip(runs, plans):
        with_plan(s, p)
    print("\n".join(shell_lines(runs)) if args.format == "shell" else json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
