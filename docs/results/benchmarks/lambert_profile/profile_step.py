"""torch.profiler on one forward + backward of lambert_base and postln_bert_base on the benchmark's batch
(benchmarks/measure.py: real_pairs, PairStep), one thread: self time and count of the largest ops side by
side, and the forward time of LaMBERT's own parts (record_function scopes). docs/benchmarks.md."""
import functools
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.measure import PairStep, real_pairs
from benchmarks.variants import LAMBERT_ARCHS, build_pair_model
from fairseq_normformer.models.lambert import LambertEmbeddings, LambertSentenceEncoder
from fairseq_normformer.modules.lambert_layer import LambertLayer, TwoPhaseAttention

SCOPES = {(LambertLayer, "forward"): "layer", (TwoPhaseAttention, "segment_phase"): "phase 1 attention",
          (TwoPhaseAttention, "_mapped_segments"): "P_ij mapped segment keys and values",
          (LambertLayer, "cls_phase"): "phase 2 ([CLS] attention + FFN)", (LambertSentenceEncoder, "layout"): "layout",
          (LambertEmbeddings, "forward"): "embeddings", (LambertSentenceEncoder, "flat_features"): "flat features"}  # fmt: skip


def scoped(cls, name, label):
    raw = cls.__dict__[name]
    fn = raw.__func__ if isinstance(raw, staticmethod) else raw

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with record_function(label):
            return fn(*args, **kwargs)

    setattr(cls, name, staticmethod(wrapper) if isinstance(raw, staticmethod) else wrapper)


def main(data_bin: str, batch: int = 8, rounds: int = 2):
    torch.set_num_threads(1)
    for (cls, name), label in SCOPES.items():
        scoped(cls, name, label)
    built = {arch: build_pair_model(arch, Path(data_bin)) for arch in LAMBERT_ARCHS}
    sample, _ = real_pairs(built["postln_bert_base"][0], batch, 0)
    steps = {arch: PairStep(model, task, sample, "cpu") for arch, (task, model) in built.items()}
    for step in steps.values():
        step()
    best = {arch: {} for arch in steps}  # {op: (self ms, count, total ms)}, the least over rounds
    for r in range(rounds):
        for arch in list(steps)[r % 2 :] + list(steps)[: r % 2]:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                steps[arch]()
            for e in prof.key_averages():
                now = (e.self_cpu_time_total / 1e3, e.count, e.cpu_time_total / 1e3)
                best[arch][e.key] = min(now, best[arch].get(e.key, now))
    ops = [k for k in best["lambert_base"] if k.startswith("aten::")] + [k for k in best["postln_bert_base"] if k.startswith("aten::")]
    ops = sorted(set(ops), key=lambda k: -max(best[a].get(k, (0,))[0] for a in best))[:25]
    print(f"{'op (self ms, calls)':32}" + "".join(f"{a:>26}" for a in best))
    for op in ops:
        print(f"{op:32}" + "".join(f"{best[a].get(op, (0, 0))[0]:18.0f} x{best[a].get(op, (0, 0))[1]:<5}" for a in best))
    for arch, times in best.items():
        print(f"{arch}: self time of all ops {sum(t[0] for k, t in times.items() if k not in SCOPES.values()):.0f} ms")
    for label in SCOPES.values():
        total, count = best["lambert_base"][label][2], best["lambert_base"][label][1]
        print(f"lambert_base forward, {label}: {total:.0f} ms over {count} calls")


if __name__ == "__main__":
    main(*sys.argv[1:2], *map(int, sys.argv[2:]))
