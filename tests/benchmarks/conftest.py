"""A tiny benchmark setup: 2 layers, 32 dim, FFN 64, 4 heads, sequence 16, batch 2, fp32."""
import dataclasses

import pytest
import torch

from benchmarks.variants import BY_NAME, SETUPS, Setup, build_model

LAYERS, EMBED, FFN, HEADS = 2, 32, 64, 4
TINY = Setup(
    archs=SETUPS["cpu"].archs,
    shape_flags=tuple(map(str, ("--decoder-layers", LAYERS, "--decoder-embed-dim", EMBED, "--decoder-ffn-embed-dim",
                                FFN, "--decoder-attention-heads", HEADS, "--activation-fn", "gelu",
                                "--share-decoder-input-output-embed"))),
    seq_len=16, batch=2, dtype=torch.float32, steps_per_timing=1, matmul_size=64,
)  # fmt: skip
# fairseq's transformer_lm defaults its input and output dims to 512 (not to the embedding dim)
FAIRSEQ_DIMS = ("--decoder-input-dim", str(EMBED), "--decoder-output-dim", str(EMBED))


def tiny_setup(name: str) -> Setup:
    if BY_NAME[name].family == "fairseq":
        return dataclasses.replace(TINY, shape_flags=TINY.shape_flags + FAIRSEQ_DIMS)
    return TINY


@pytest.fixture(scope="session")
def dict_dir(tmp_path_factory):
    """A data directory holding only dict.txt (50 words), all a model needs to be built."""
    path = tmp_path_factory.mktemp("dict")
    (path / "dict.txt").write_text("".join(f"word{i} {100 - i}\n" for i in range(50)))
    return path


@pytest.fixture(scope="session")
def build_tiny(dict_dir):
    return lambda name: build_model(BY_NAME[name], tiny_setup(name), dict_dir)
