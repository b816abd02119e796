"""The GPU check (benchmarks/gpu_check.py, scripts/gpu/, docs/gpu.md) on the CPU: its FLOPs per token against
the formula, the MFU and bandwidth arithmetic, a real pytest junit report read back, the stage records, the CUDA
tests collected and skipped here, and scripts/gpu/run.sh --dry-run end to end (the install into a --target
folder with a wheel built here, two stages)."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

from benchmarks import gpu_check
from fairseq_normformer import memory_plan

from ..conftest import REPO_ROOT


def test_flops_per_token_traced_at_125m_equal_the_formula():
    traced = gpu_check.model_flops_per_token("preln_lm_gpt3_small", [], batch=1, vocab=memory_plan.GPT2_VOCAB)
    d, f, layers, seq, vocab = 768, 3072, 12, 2048, memory_plan.GPT2_VOCAB
    # 6 x the matrix-product weights; attention's QK^T and AV forward (2·2Td), backward twice that plus QK^T again
    formula = 6 * (layers * (4 * d * d + 2 * d * f) + vocab * d) + layers * (3 * 2 * 2 * seq * d + 2 * seq * d)
    assert traced == formula == memory_plan.flops_per_token(memory_plan.ModelShape.gpt3("preln_lm_gpt3_small"), seq)


def test_speed_summary_gives_tokens_per_second_mfu_ratios_and_memory_over_plan():
    run = {"tokens_per_step": 16384, "peak_cuda_bytes": 21 * 2**29}  # 10.5 GiB
    runs = {"preln": [{**run, "step_seconds": [0.10, 0.10, 0.12]}, {**run, "step_seconds": [0.10, 0.11, 0.10]}],
            "normformer": [{**run, "step_seconds": [0.11, 0.11, 0.12]}, {**run, "step_seconds": [0.12, 0.11, 0.10]}]}
    planned = {"preln": {"total": 10 * 2**30}, "normformer": {"total": 12 * 2**30}}
    peak = gpu_check.matmul_flops_per_second(8192, 0.002)
    assert peak == 2 * 8192**3 / 0.002
    s = gpu_check.speed_summary(runs, {"preln": 1.0e9, "normformer": 1.0e9}, peak, planned)
    # Pre-LN: median step 0.10 s -> 163,840 tokens/s; NormFormer: median of 0.11, 0.11, 0.12, 0.12, 0.11, 0.10 = 0.11
    assert s["preln"]["tokens_per_second"] == pytest.approx(163840)
    assert s["normformer"]["tokens_per_second"] == pytest.approx(16384 / 0.11)
    assert s["normformer"]["mfu"] == pytest.approx(1.0e9 * 16384 / 0.11 / (2 * 8192**3 / 0.002))
    ratios = sorted([1.1, 1.1, 1.0, 1.2, 1.0, 1.0])  # update i over Pre-LN's update i, same round
    assert s["normformer"]["step_time_over_preln"]["median"] == pytest.approx(1.05)
    assert s["normformer"]["step_time_over_preln"]["interval_95"] == pytest.approx((ratios[0], ratios[-1]))
    assert s["preln"]["peak_over_plan"] == 1.05 and s["normformer"]["peak_over_plan"] == 0.875
    met = gpu_check.judged(s)  # memory within 10% of the plan: Pre-LN's +5% is, NormFormer's -12.5% is not
    assert met["preln_memory"] is True and met["normformer_memory"] is False
    assert met["normformer_triton_step_time"] is None  # not measured
    assert met["preln_mfu"] == (1.0e9 * 163840 / peak >= 0.40)


def test_kernel_bandwidth_counts_bytes_read_and_written():
    rows = [{"dtype": "float16", "width": 1024, "pass": "forward", "rows": 1000, "torch_ms": 0.02, "triton_ms": 0.01,
             "copy_ms": 0.008},
            {"dtype": "bfloat16", "width": 768, "pass": "fwd+bwd", "rows": 1000, "torch_ms": 0.05, "triton_ms": 0.04,
             "copy_ms": 0.008}]  # fmt: skip
    forward, both = gpu_check.kernel_bandwidths(rows)
    tensor = 1000 * 1024 * 2  # fp16 bytes
    assert forward["copy_gbps"] == pytest.approx(2 * tensor / 0.008e-3 / 1e9)
    assert forward["triton_gbps"] == pytest.approx(2 * tensor / 0.01e-3 / 1e9)  # reads x, writes y
    assert forward["triton_share_of_copy"] == pytest.approx(0.8) and forward["triton_over_torch_speed"] == 2
    assert both["bytes"] == 5 * 1000 * 768 * 2  # x and y forward; x, dy read and dx written backward


def test_junit_summary_reads_a_real_pytest_report(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent("""
        import pytest
        def test_passes(): pass
        def test_fails(): assert 1 == 2, "one is not two"
        @pytest.mark.skip(reason="not here")
        def test_skipped(): pass
    """))
    xml = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                    str(tmp_path / "test_sample.py")], cwd=tmp_path, capture_output=True)  # fmt: skip
    s = gpu_check.junit_summary(xml)
    assert (s["tests"], s["passed"], s["failures"], s["skipped"], s["errors"]) == (3, 1, 1, 1, 0)
    assert s["failed"][0]["test"].endswith("test_fails") and "one is not two" in s["failed"][0]["message"]


@pytest.mark.parametrize("returncode, status", [(0, "ok"), (124, "timeout"), (137, "timeout"), (1, "failed")])
def test_finish_records_how_a_stage_ended(returncode, status, tmp_path):
    record = gpu_check.new_record("kernels", True)
    record["status"] = "ok" if returncode == 0 else "running"  # a stage stopped by its cap is still "running"
    gpu_check.write_record(tmp_path, record)
    gpu_check.finish(tmp_path, "kernels", returncode)
    written = json.loads((tmp_path / "kernels.json").read_text())
    assert (written["status"], written["returncode"], written["dry_run"]) == (status, returncode, True)


def test_finish_without_a_record_writes_one(tmp_path):
    gpu_check.finish(tmp_path, "speed_125m", 1)
    assert json.loads((tmp_path / "speed_125m.json").read_text())["status"] == "failed"


@pytest.mark.slow
def test_cuda_tests_are_collected_and_skipped_without_a_gpu():
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-v", "-p", "no:cacheprovider", "-rs", "tests/cuda"]
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True).stdout  # one line per test (-v)
    assert "passed" not in out and "failed" not in out and "error" not in out.lower()
    assert "skipped" in out and "needs a CUDA GPU (docs/gpu.md)" in out
    assert "test_training.py::test_family_trains_on_the_gpu_and_resumes_equal[lm_normformer---fp16] SKIPPED" in out
    assert "test_kernels.py::test_layer_norm_matches_torch_on_the_gpu[4096-float16] SKIPPED" in out


PROBE_FILES = {  # a wheel's files as installed: a module, a .pth file that marks the processes it runs in, metadata
    "gpu_check_probe.py": "def main():\n    print('probe ran')\n",
    "gpu_check_probe.pth": "import os; os.environ['GPU_CHECK_PROBE_PTH'] = '1'\n",
    "gpu_check_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: gpu-check-probe\nVersion: 1.0\n",
    "gpu_check_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "gpu_check_probe-1.0.dist-info/entry_points.txt": "[console_scripts]\ngpu-check-probe = gpu_check_probe:main\n",
    "gpu_check_probe-1.0.data/scripts/probe-data-script": "#!/bin/sh\n",  # pip puts it in bin/; unpacking leaves it out
}


def probe_wheel(tmp_path):
    """A wheel written here (a zip of its files and their RECORD)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    record = "gpu_check_probe-1.0.dist-info/RECORD"
    with zipfile.ZipFile(wheels / "gpu_check_probe-1.0-py3-none-any.whl", "w") as wheel:
        for name, text in PROBE_FILES.items():
            wheel.writestr(name, text)
        wheel.writestr(record, "".join(f"{name},,\n" for name in [*PROBE_FILES, record]))
    return wheels


@pytest.mark.slow
def test_run_sh_dry_run_installs_the_wheels_and_writes_each_stage(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_WHEELS": str(probe_wheel(tmp_path)), "GPU_WORK": str(work),
           "GPU_STAGES": "cuda_tests kernels"}  # fmt: skip
    subprocess.run(["bash", "scripts/gpu/run.sh", "--dry-run", str(out)], cwd=REPO_ROOT, env=env, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    site = work / "site"
    assert (site / "gpu_check_probe.py").exists() and (site / "fairseq_normformer_startup.pth").exists()
    scripts = {p.name for p in (work / "bin").iterdir()}
    assert {"gpu-check-probe", "normformer-export-hf", "normformer-paper-settings"} <= scripts
    probe = ("import os, subprocess; print(os.environ.get('GPU_CHECK_PROBE_PTH'), "
             "subprocess.check_output(['gpu-check-probe'], text=True).strip())")
    probe_env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}:{site}", "PATH": f"{work / 'bin'}:{os.environ['PATH']}"}
    ran = subprocess.run([sys.executable, "-c", probe], env=probe_env, capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["1", "probe", "ran"]  # the .pth in the --target folder ran: it is a site dir
    records = {stage: json.loads((out / f"{stage}.json").read_text()) for stage in ("cuda_tests", "kernels")}
    assert all(r["dry_run"] is True and r["status"] == "ok" and r["returncode"] == 0 for r in records.values())
    results = records["cuda_tests"]["results"]
    assert results["tests"] == results["skipped"] > 0 and results["failed"] == []
    assert records["kernels"]["skipped"] and sorted(p.name for p in out.glob("*.log")) == [
        "cuda_tests.log", "cuda_tests_pytest.log", "install.log", "kernels.log", "run.log"]


def test_site_dir_unpacks_wheels_where_the_host_has_no_pip(tmp_path):
    spec = importlib.util.spec_from_file_location("site_dir", REPO_ROOT / "scripts" / "gpu" / "site_dir.py")
    site_dir = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site_dir)
    site, bin_dir = tmp_path / "site", tmp_path / "bin"
    site.mkdir()
    site_dir.main(site, bin_dir, list(probe_wheel(tmp_path).iterdir()))
    assert sorted(p.name for p in site.iterdir()) == [
        "gpu_check_probe-1.0.dist-info", "gpu_check_probe.pth", "gpu_check_probe.py", "sitecustomize.py"]
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run([bin_dir / "gpu-check-probe"], env=env, capture_output=True, text=True, check=True)
    assert ran.stdout == "probe ran\n"
    assert site_dir.project_scripts()["normformer-export-hf"] == "fairseq_normformer.cli.export_hf:main"
