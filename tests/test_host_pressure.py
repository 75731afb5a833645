"""The host is a reading: a point over which other work held the host's CPUs (Linux PSI) is
unknown and taken again, not read as a slow server."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.load.point import load_point
from kneepoint.load.trust import Trust
from kneepoint.probes import samplers
from kneepoint.probes.samplers import HostPressure
from kneepoint.records.loadpoint import Signals
from kneepoint.records.measure import RequestRecord
from kneepoint.records.measurement import MeasurementSpec
from kneepoint.records.slo import ClassSlo, Slo

SLO = Slo(default=ClassSlo(ttft_p99_ms=1000))


def _psi(path: Path, stalled_us: int) -> None:
    path.write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={stalled_us}\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )


def test_the_pressure_is_the_stalled_share_of_the_wall_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    psi, now = tmp_path / "cpu", [100.0]
    monkeypatch.setattr(samplers.time, "perf_counter", lambda: now[0])
    _psi(psi, 5_000_000)
    host = HostPressure(psi)
    _psi(psi, 9_100_000)  # 4.1 s of some task waiting over 10 s
    now[0] += 10.0
    assert host.share() == pytest.approx(0.41)
    assert HostPressure(tmp_path / "absent").share() is None


def _records() -> list[RequestRecord]:
    return [
        RequestRecord(index=i, traffic_class="c", scheduled_s=i * 0.1, sent_s=i * 0.1,
                      chunk_times_s=(i * 0.1 + 0.05, i * 0.1 + 0.08), end_s=i * 0.1 + 0.08,
                      prompt_tokens=8, output_tokens=2)
        for i in range(100)
    ]  # fmt: skip


def test_a_point_on_a_busy_host_is_not_counted() -> None:
    busy = load_point(10.0, _records(), SLO, signals=Signals(host_cpu_pressure=0.41))
    assert busy.host_busy and not busy.valid
    assert busy.invalid_reason() == (
        "the host is busy: CPU pressure 41% over the point; not counted"
    )
    quiet = load_point(10.0, _records(), SLO, signals=Signals(host_cpu_pressure=0.02))
    assert not quiet.host_busy and quiet.valid
    lenient = Trust.of(SLO, MeasurementSpec(max_host_cpu_pressure=0.5))
    assert load_point(10.0, _records(), SLO, signals=Signals(host_cpu_pressure=0.41),
                      trust=lenient).valid  # fmt: skip
