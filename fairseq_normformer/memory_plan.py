"""Bytes per GPU of training a ``*_gpt3_*`` preset: weights, gradients, optimizer state, activations.

Model states follow ZeRO's accounting (Rajbhandari et al. 2020, Sec. 3.1: Ψ parameters, Adam's two
fp32 moments 8Ψ, mixed precision's fp32 master copy) as fairseq 0.12 lays them out:

==========================  =========  ===================  ===================================
precision                   weights    gradients            optimizer state
==========================  =========  ===================  ===================================
fp32                        4Ψ         4Ψ                   8Ψ (moments)
--fp16 / --bf16             2Ψ         2Ψ                   8Ψ + fp32 master weights and grads 8Ψ
--memory-efficient-fp16     2Ψ         2Ψ                   8Ψ (fairseq's Adam keeps fp32 moments)
==========================  =========  ===================  ===================================

and per backend: DDP (c10d) replicates all and adds its gradient buckets (one more gradient's size,
torch's ``gradient_as_bucket_view=False``; none on one GPU, where fairseq wraps no DDP); ``--zero-sharding os`` (fairscale's OSS) gives each rank
the moments of its parameters only, assigned greedily in model order as OSS does, the master copy
stays whole; fully_sharded (fairscale FSDP) shards weights, gradients and moments 1/N, with the
fp32 shard as master, and gathers one unit's full weights and gradients at a time; ``--cpu-offload``
leaves the GPU that gathered unit alone.

Activations (``activation_bytes``) are what autograd keeps for backward, counted tensor by tensor
from NormFormerLayer (modules/normformer_layer.py) and checked against torch's saved-tensor hooks on
CPU (tests/test_memory_plan.py) and, at the paper's sizes, on the meta device with CUDA's kernels
(meta_trace.py, ``normformer-paper-settings --trace``), in the manner of Korthikanti et al. 2022 (Sec. 4.1).
"""
import math
from dataclasses import dataclass

GIB = 2**30
# GPT-3 sizes used in the paper (Table 6): layers, model dim, heads; FFN = 4 x model dim. The presets of
# models/normformer_lm.py are built from them; this module imports neither torch nor fairseq.
GPT3_SIZES = {
    "gpt3_small": (12, 768, 12),  # 125M
    "gpt3_medium": (24, 1024, 16),  # 355M
    "gpt3_large": (24, 1536, 16),  # 760M
    "gpt3_xl": (24, 2048, 32),  # 1.3B
    "gpt3_2_7": (32, 2560, 32),  # 2.7B
}
GPUS = {"V100 16GB": 16, "V100 32GB": 32, "A100 40GB": 40, "A100 80GB": 80, "H100 80GB": 80}
RESERVED_BYTES = GIB  # CUDA context, cuBLAS workspace and allocator slack, not counted below
GPT2_VOCAB = 50264  # GPT-2's 50257 BPE symbols with fairseq's specials, padded to a multiple of 8
FSDP_MIN_PARAMS_TO_WRAP = 10**8  # fairseq's --min-params-to-wrap default

# precision: (bytes of a weight, gradient and activation; keeps an fp32 master copy)
PRECISIONS = {"fp32": (4, False), "fp16": (2, True), "bf16": (2, True), "memory-efficient-fp16": (2, False)}
FSDP_PRECISION = {"memory-efficient-fp16": "fp16"}
BUCKET_CAP_BYTES = 25 * 2**20  # fairseq's --bucket-cap-mb 25: fairscale's reduce-scatter bucket under FSDP
BACKEND_ARGS = {
    "c10d": ["--ddp-backend", "pytorch_ddp"],
    "zero-os": ["--ddp-backend", "pytorch_ddp", "--zero-sharding", "os"],
    "fsdp": ["--ddp-backend", "fully_sharded"],
    "fsdp-cpu-offload": ["--ddp-backend", "fully_sharded", "--cpu-offload"],
}  # fmt: skip
ADAM_MOMENT_BYTES = 8  # exp_avg and exp_avg_sq, fp32
MASTER_BYTES = 8  # fp32 master weight and its fp32 gradient


@dataclass(frozen=True)
class ModelShape:
    layers: int
    embed: int
    ffn: int
    heads: int
    vocab: int = GPT2_VOCAB
    normformer: bool = True  # Post-Attn LN, FFN LN and HeadScale (the paper's three operations)

    @classmethod
    def gpt3(cls, preset: str, vocab: int = GPT2_VOCAB) -> "ModelShape":
        """preln_lm_gpt3_xl, normformer_lm_gpt3_xl, ...: the shapes of models/normformer_lm.py."""
        model, _, size = preset.partition("_lm_")
        if model not in ("preln", "normformer") or size not in GPT3_SIZES:
            raise ValueError(f"no memory plan for {preset!r}: one of the preln_lm_gpt3_* or normformer_lm_gpt3_* presets")
        layers, embed, heads = GPT3_SIZES[size]
        return cls(layers, embed, 4 * embed, heads, vocab, normformer=model == "normformer")


def layer_parameter_tensors(s: ModelShape) -> list:
    """Element counts of one layer's parameters, in NormFormerLayer's order (sinusoidal positions)."""
    d, f = s.embed, s.ffn
    head_scale = [s.heads] if s.normformer else []
    attention = head_scale + [d * d, d] * 4 + [d, d]  # q, k, v, out; self_attn_layer_norm
    post_attn_ln = [d, d] if s.normformer else []
    ffn_ln = [f, f] if s.normformer else []
    return attention + post_attn_ln + [f * d, f] + ffn_ln + [d * f, d, d, d]  # fc1, FFN LN, fc2, final_layer_norm


def parameter_tensors(s: ModelShape) -> list:
    """Element counts of every parameter in ``model.parameters()`` order: the embedding (tied with
    the output projection), the layers, the final LayerNorm."""
    return [s.vocab * s.embed] + layer_parameter_tensors(s) * s.layers + [s.embed, s.embed]


def oss_partition_sizes(tensors: list, world_size: int) -> list:
    """Parameters per rank under fairscale's OSS: each tensor goes to the rank with the fewest so far."""
    sizes = [0] * world_size
    for numel in tensors:
        sizes[sizes.index(min(sizes))] += numel
    return sizes


def fsdp_gathered_params(s: ModelShape, checkpoint_activations: bool) -> int:
    """Parameters FSDP holds unsharded at once. fairseq wraps each layer in its own unit when
    activations are checkpointed or a layer has --min-params-to-wrap (1e8) parameters; the root unit
    (embedding, final LN) stays gathered, and one layer is prefetched while another computes.
    Otherwise the model is one unit, gathered whole."""
    layer = sum(layer_parameter_tensors(s))
    if checkpoint_activations or layer >= FSDP_MIN_PARAMS_TO_WRAP:
        return s.vocab * s.embed + 2 * s.embed + 2 * layer
    return sum(parameter_tensors(s))


def state_bytes(s: ModelShape, precision: str, backend: str, world_size: int, checkpoint_activations=False) -> dict:
    """Bytes per GPU of weights, gradients and optimizer state as held between steps, of DDP's
    gradient buckets, and of the full weights and gradients FSDP gathers while it computes."""
    tensors = parameter_tensors(s)
    params = sum(tensors)
    element, master = PRECISIONS[precision]
    master_bytes = MASTER_BYTES * params if master else 0
    if backend in ("c10d", "zero-os"):
        moments_params = params if backend == "c10d" else max(oss_partition_sizes(tensors, world_size))
        return {"weights": element * params, "gradients": element * params,
                "optimizer": master_bytes + ADAM_MOMENT_BYTES * moments_params,
                "ddp_buckets": element * params if world_size > 1 else 0, "fsdp_gathered": 0}  # fmt: skip
    gathered = 2 * element * fsdp_gathered_params(s, checkpoint_activations)  # weights and gradients
    if backend == "fsdp-cpu-offload":
        return {"weights": 0, "gradients": 0, "optimizer": 0, "ddp_buckets": 0, "fsdp_gathered": gathered}
    shard = math.ceil(params / world_size)
    shard_bytes = (4 if master else element) * shard  # with mixed precision the fp32 shard is the master
    # fairscale reduce-scatters the gradients of units smaller than its bucket's share (fairseq's
    # --bucket-cap-mb over the ranks) through that bucket, and each gradient stays a view of the
    # bucket's output shard, kept whole: at least BUCKET_CAP_BYTES / world_size bytes
    gradients = max(shard_bytes, BUCKET_CAP_BYTES // world_size)
    return {"weights": shard_bytes, "gradients": gradients, "optimizer": ADAM_MOMENT_BYTES * shard,
            "ddp_buckets": 0, "fsdp_gathered": gathered}  # fmt: skip


def layer_activation_bytes(s: ModelShape, element: int, dropout_mask: int) -> int:
    """Bytes one layer keeps for backward per token. Pre-LN layer: the two LayerNorms' inputs and
    outputs (4d) and their fp32 mean and rstd (2 x 8 bytes), q, k, v and the attention output (4d),
    the fused attention's fp32 log-sum-exp (4 bytes a head), FC1's output, which fairseq's GELU keeps
    in fp32 (it computes in fp32: 4f bytes in any precision), and FC2's input (f).
    NormFormer adds the Post-Attn LN's input (d) and the FFN LN's statistics (2 x 8 bytes); its fused
    activation + FFN LN keeps FC1's output in the activations' dtype and its output is FC2's input;
    HeadScale is folded into W^O (per layer, not per token: ``layer_constant_bytes``). Dropout keeps a
    mask for each residual branch (2d)."""
    d, f = s.embed, s.ffn
    fc1_output = element * f if s.normformer else 4 * f
    tensors = 4 * d + 4 * d + f + (d if s.normformer else 0)
    layer_norms = 4 if s.normformer else 2
    return element * tensors + fc1_output + 8 * layer_norms + 4 * s.heads + dropout_mask * 2 * d


def layer_constant_bytes(s: ModelShape, element: int) -> int:
    """HeadScale's γ repeated over the head dimension and W^O with γ folded in, kept once per layer."""
    return element * (s.embed + s.embed * s.embed) if s.normformer else 0


def flops_per_token(s: ModelShape, seq_len: int, checkpoint_activations=False) -> int:
    """FLOPs of a training step per token as torch's FlopCounterMode counts them: 6 x the parameters in
    matrix products (q, k, v, W^O, FC1, FC2 and the output projection; forward 2, backward 4), and
    attention's products over the whole T x T square (causal masking saves nothing in the count):
    forward QK^T and AV, 2Td each, and flash attention's backward 5 such products (it recomputes QK^T).
    ``--checkpoint-activations`` runs the layers' forward once more in backward."""
    d, f = s.embed, s.ffn
    layer_forward = 2 * (4 * d * d + 2 * d * f) + 2 * 2 * seq_len * d
    layers = s.layers * (3 + checkpoint_activations) * layer_forward + s.layers * 2 * seq_len * d  # +QK^T again
    return layers + 6 * s.vocab * d


def activation_bytes(s: ModelShape, batch_size: int, seq_len: int, element: int, checkpoint_activations=False,
                     dropout_mask: int = 0) -> int:  # fmt: skip
    """Bytes autograd keeps at the end of the forward pass, for ``batch_size`` sequences of ``seq_len``.
    ``dropout_mask``: bytes per element of a dropout mask, 0 without dropout (1 on CUDA, a bool; on
    CPU the mask has the activations' dtype). Attention's probabilities are not kept (fused kernels
    recompute them; attention dropout with the math kernel would add heads x T² per sequence).
    With ``--checkpoint-activations`` a layer keeps only its input, and backward recomputes one
    layer at a time (its activations are added once). After the layers: the embedding's dropout mask,
    the final LayerNorm (input, output, statistics) and the fp32 log-probabilities fairseq's
    cross-entropy keeps (4V), and the int64 tokens."""
    tokens = batch_size * seq_len
    layer = tokens * layer_activation_bytes(s, element, dropout_mask) + layer_constant_bytes(s, element)
    if checkpoint_activations:
        layers = s.layers * tokens * element * s.embed + layer
    else:
        layers = s.layers * layer
    head = tokens * (dropout_mask * s.embed + 2 * element * s.embed + 8 + 4 * s.vocab + 8)
    return layers + head


@dataclass
class Plan:
    preset: str
    precision: str
    backend: str
    world_size: int
    batch_size: int
    seq_len: int
    checkpoint_activations: bool
    parameters: int
    bytes: dict  # weights, gradients, optimizer, ddp_buckets, fsdp_gathered, activations

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def fits(self, gpu_gb: float) -> bool:
        return self.total + RESERVED_BYTES <= gpu_gb * GIB

    def fairseq_args(self) -> list:
        """The backend's fairseq-train arguments (the precision's are the caller's)."""
        args = list(BACKEND_ARGS[self.backend])
        if self.backend == "zero-os" and PRECISIONS[self.precision][1]:
            args.append("--fp16-no-flatten-grads")  # fairseq: ZeRO is incompatible with flattened fp16 grads
        return args + (["--checkpoint-activations"] if self.checkpoint_activations else [])


def plan(preset: str, precision: str, backend: str, world_size: int, batch_size: int, seq_len: int,
         checkpoint_activations=False, dropout=True) -> Plan:  # fmt: skip
    if backend.startswith("fsdp"):  # fully_sharded refuses --memory-efficient-fp16 (checks.py): it runs --fp16
        precision = FSDP_PRECISION.get(precision, precision)
    s = ModelShape.gpt3(preset)
    element = PRECISIONS[precision][0]
    counts = state_bytes(s, precision, backend, world_size, checkpoint_activations)
    mask = 1 if dropout else 0
    counts["activations"] = activation_bytes(s, batch_size, seq_len, element, checkpoint_activations, mask)
    return Plan(preset, precision, backend, world_size, batch_size, seq_len, checkpoint_activations,
                sum(parameter_tensors(s)), counts)  # fmt: skip


def auto_plan(preset: str, precision: str, world_size: int, batch_size: int, seq_len: int, gpu_gb: float,
              dropout=True) -> Plan:  # fmt: skip
    """The first plan that fits ``gpu_gb``: DDP, ZeRO-1, FSDP, then each with activation checkpointing
    (a third more compute), then FSDP offloading to the CPU (slowest) without and with it."""
    on_gpu = [backend for backend in BACKEND_ARGS if backend != "fsdp-cpu-offload"]
    candidates = [(b, False) for b in on_gpu] + [(b, True) for b in on_gpu]
    for backend, checkpoint in candidates + [("fsdp-cpu-offload", False), ("fsdp-cpu-offload", True)]:
        p = plan(preset, precision, backend, world_size, batch_size, seq_len, checkpoint, dropout)
        if p.fits(gpu_gb):
            return p
    raise ValueError(
        f"{preset} does not fit {gpus_text(world_size)} of {gpu_gb:g} GB with --batch-size {batch_size} x {seq_len} "
        f"tokens in {precision}, on any backend even with --checkpoint-activations: "
        "lower --batch-size (raising --update-freq) or use more or larger GPUs"
    )


def report_lines(p: Plan) -> list:
    """The plan as text: bytes per GPU, and which GPUs it fits."""
    gib = lambda n: f"{n / GIB:8.2f} GiB"  # noqa: E731
    lines = [f"memory per GPU: {p.preset} ({p.parameters / 1e6:.0f}M parameters), {p.precision}, {p.backend}, "
             f"{gpus_text(p.world_size)}, --batch-size {p.batch_size} x {p.seq_len} tokens"
             + (", --checkpoint-activations" if p.checkpoint_activations else "")]  # fmt: skip
    lines += [f"  {name:<14}{gib(n)}" for name, n in p.bytes.items()]
    lines.append(f"  {'total':<14}{gib(p.total)}  (+ {RESERVED_BYTES / GIB:g} GiB CUDA context and allocator slack)")
    fits = ", ".join(f"{gpu} {'yes' if p.fits(gb) else 'no'}" for gpu, gb in GPUS.items())
    return lines + [f"  fits: {fits}"]


def gpus_text(n: int) -> str:
    return f"{n} GPU{'' if n == 1 else 's'}"


def gib_text(n: int) -> str:
    return f"{n / GIB:.2f}"


def fit_text(preset: str, precision: str, world_size: int, batch_size: int, seq_len: int, gpu_gb: float, dropout) -> str:
    """The backend ``auto_plan`` picks for ``gpu_gb`` and its total GiB, e.g. "zero-os + ckpt: 11.46"."""
    try:
        p = auto_plan(preset, precision, world_size, batch_size, seq_len, gpu_gb, dropout)
    except ValueError:
        return "does not fit"
    return f"{p.backend}{' + ckpt' if p.checkpoint_activations else ''}: {gib_text(p.total)}"


def table_lines(runs: list, precision: str, world_size: int, seq_len: int) -> list:
    """A markdown table, GiB per GPU, a row per run (label, preset, batch size, dropout): weights, gradients,
    Adam and DDP's buckets under DDP; activations without (and with) --checkpoint-activations; per GPU of
    GPUS the backend ``auto_plan`` picks and its total."""
    header = ["model", "--batch-size", "weights + gradients + Adam + DDP buckets", "activations (checkpointed)", *GPUS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, preset, batch_size, dropout in runs:
        ddp, checkpointed = (plan(preset, precision, "c10d", world_size, batch_size, seq_len, ckpt, dropout)
                             for ckpt in (False, True))  # fmt: skip
        state = ddp.total - ddp.bytes["activations"]
        activations = f"{gib_text(ddp.bytes['activations'])} ({gib_text(checkpointed.bytes['activations'])})"
        fits = [fit_text(preset, precision, world_size, batch_size, seq_len, gb, dropout) for gb in GPUS.values()]
        lines.append("| " + " | ".join([label, str(batch_size), gib_text(state), activations, *fits]) + " |")
    return lines
