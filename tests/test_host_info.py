"""The run states the machine it measured from: CPU model, cores, the instruction sets that
set vLLM's CPU build's speed (7-10x slower without AVX-512), and the GPUs and their driver."""

from __future__ import annotations

from pathlib import Path

from kneepoint.config import load_study
from kneepoint.config.catalog import gpu_catalogue
from kneepoint.config.gpu_identity import gpu_mismatch, identify_gpu, study_gpu_mismatch
from kneepoint.probes.telemetry.host_info import describe_host
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.host import HostInfo
from kneepoint.records.ledger import RunStarted
from kneepoint.run.ledger import Ledger

from .conftest import QUICKSTART, TuneRun

SAPPHIRE = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8
"""


def test_the_cpu_is_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(SAPPHIRE)
    host = describe_host(cpuinfo)
    assert host.cpu_model == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert host.isa == ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16",
                        "amx_int8", "amx_tile")  # fmt: skip
    assert host.cpu_cores >= 1
    assert describe_host(tmp_path / "absent").cpu_model is None


def test_the_host_in_one_line() -> None:
    epyc = HostInfo(cpu_model="AMD EPYC 7B13", cpu_cores=2, isa=("avx2",))
    assert epyc.words() == "AMD EPYC 7B13, 2 cores, AVX2 (no AVX-512); no GPU"
    h100s = HostInfo(cpu_model="Intel Xeon", cpu_cores=16, isa=("avx2", "avx512f", "amx_bf16"),
                     gpus=("NVIDIA H100 80GB HBM3",) * 2, gpu_driver="550.54.15")  # fmt: skip
    assert h100s.words() == (
        "Intel Xeon, 16 cores, AVX-512, AMX-BF16; 2 x NVIDIA H100 80GB HBM3 (driver 550.54.15)"
    )


def test_a_tune_records_its_host_and_its_report_states_it(fp8_run: TuneRun) -> None:
    [started] = [e for e in Ledger(fp8_run.folder / "ledger.jsonl").read()
                 if isinstance(e, RunStarted)]  # fmt: skip
    assert started.host is not None and started.host.cpu_cores >= 1
    report = (fp8_run.folder / "report.md").read_text()
    assert f"Measured from: {started.host.words()}." in report


def test_an_nvml_name_names_its_catalogue_gpu_by_the_longest_match() -> None:
    # nvidia-smi on a GB200 tray reads "NVIDIA GB200", which holds the B200's "B200" too
    names = {"NVIDIA GB200": "gb200", "NVIDIA B200": "b200", "NVIDIA H100 80GB HBM3": "h100-sxm",
             "NVIDIA H200": "h200-sxm", "NVIDIA A100-SXM4-80GB": "a100-80gb-sxm"}  # fmt: skip
    for reported, name in names.items():
        found = identify_gpu(reported)
        assert found is not None and found.name == name, reported
    assert identify_gpu("NVIDIA GeForce RTX 4090") is None


def test_a_study_that_prices_another_gpu_than_nvml_reports_is_named() -> None:
    gpus = gpu_catalogue()
    assert gpu_mismatch(gpus["h100-sxm"], ("NVIDIA H100 80GB HBM3",) * 8) is None
    assert gpu_mismatch(gpus["h100-sxm"], ()) is None  # no driver, no GPU: nothing to compare
    said = gpu_mismatch(gpus["b200"], ("NVIDIA GB200",) * 4)
    assert said is not None and "NVIDIA GB200 (gb200)" in said and "gpu: b200" in said
    unknown = gpu_mismatch(gpus["h100-sxm"], ("NVIDIA GeForce RTX 4090",))
    assert unknown is not None and "not in the catalogue" in unknown


def test_only_a_server_launched_here_is_held_to_the_gpus_nvml_sees() -> None:
    h200s = HostInfo(cpu_cores=16, gpus=("NVIDIA H200",))
    simulated = load_study(QUICKSTART)  # an H100 on the virtual clock: the host's GPUs are not it
    assert study_gpu_mismatch(simulated, h200s) is None
    launched = simulated.model_copy(update={"backend": VllmBackend()})
    said = study_gpu_mismatch(launched, h200s)
    assert said is not None and "NVIDIA H200 (h200-sxm)" in said
    assert study_gpu_mismatch(launched, None) is None
