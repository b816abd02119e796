"""measure() on the tiny models → JSON → the rendered section (structure only; no timing assertions)."""
import json

import pytest
from benchmarks.measure import measure
from benchmarks.report import results_section
from benchmarks.variants import BY_NAME

from .conftest import TINY


@pytest.mark.slow
def test_measure_writes_what_the_renderer_reads(dict_dir, monkeypatch, build_tiny):
    # measure() builds each variant from one setup; give fairseq's models the tiny dims they need
    monkeypatch.setattr("benchmarks.measure.build_model", lambda variant, setup, data_dir: build_tiny(variant.name))
    results = json.loads(json.dumps(measure("cpu", TINY, dict_dir, rounds=2, matmul_repeats=2)))
    assert list(results["variants"]) == ["fairseq_transformer_lm", "fairseq_scale_flags", "preln", "normformer",
                                         "preln_bf16", "normformer_bf16"]
    for name, measured in results["variants"].items():
        assert measured["flags"] == list(BY_NAME[name].flags)
        assert measured["dtype"] == ("bfloat16" if name.endswith("_bf16") else "float32")
        assert len(measured["seconds_per_step"]) == 2 and set(measured["seconds_per_step"][0]) == {"wall", "cpu"}
        assert measured["params"] == sum(p.numel() for p in build_tiny(name).parameters())
        assert measured["peak_bytes"] > 0
    assert [(p["dtype"], p["size"], len(p["seconds"])) for p in results["matmul_peaks"]] == [
        ("float32", 64, 2), ("bfloat16", 64, 2)]
    assert set(results["profiles"]) == {"fairseq_scale_flags", "preln", "normformer", "normformer_bf16"}
    assert results["shapes"]["tokens"] == TINY.batch * TINY.seq_len
    results.update(device="cpu", date="d", command="c", machine="m", load_average=[1.0, 1.0, 1.0],
                   versions={}, setup={"archs": TINY.archs, "shape_flags": [], "seq_len": 16, "batch": 2,
                                       "dtype": "float32", "steps_per_timing": 1})  # fmt: skip
    section = results_section(results, [], "cpu.json")
    assert "ops that differ most between `preln` and `normformer`" in section
    assert "ops that differ most between `normformer` and `normformer_bf16`" in section
    assert "Activations `normformer` keeps for backward beyond `preln`" in section
    assert "- `normformer_bf16`: " in section and "of the bfloat16 matmul peak" in section
