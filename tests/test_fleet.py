"""Fleet sizing from a measured SLO capacity: replicas for a peak, GPUs, dollars an hour and
per million output tokens, utilisation (kneepoint.load.fleet), and its section in the report."""

from __future__ import annotations

import pytest

from kneepoint.load.fleet import output_per_request, size_fleet
from kneepoint.records.lengths import mean_length_tokens
from kneepoint.records.study import FleetSpec
from kneepoint.report.data import gather
from kneepoint.report.fleet import saving
from kneepoint.run.folder import RunFolder

from .conftest import TuneRun


def test_replicas_carry_the_peak_with_headroom_and_tokens_are_paid_at_the_average() -> None:
    # 40 req/s replicas (the real H100 base), 100 req/s peak, 20% headroom: 32 usable each,
    # 4 replicas; average 50 req/s of 200-token answers at $3 per GPU-hour.
    size = size_fleet(40.0, 1, 200.0, FleetSpec(peak_rps=100.0), 3.0)
    assert size.replicas == 4 and size.gpus == 4
    assert size.usd_per_hour == pytest.approx(12.0)
    assert size.usd_per_million_output == pytest.approx(12.0 / (50 * 200 * 3600) * 1e6)
    assert size.utilisation == pytest.approx(50 / 160)


def test_tensor_parallel_replicas_count_every_gpu_and_a_price_is_optional() -> None:
    size = size_fleet(30.0, 4, 100.0, FleetSpec(peak_rps=24.0, headroom=0.0), None)
    assert size.replicas == 1 and size.gpus == 4  # exactly at capacity: one replica
    assert size.usd_per_hour is None and size.usd_per_million_output is None


def test_without_a_peak_one_replica_is_priced_at_its_usable_capacity() -> None:
    size = size_fleet(40.0, 1, 200.0, FleetSpec(), 3.0)
    assert size.replicas is None and size.gpus is None
    assert size.usd_per_hour == pytest.approx(3.0)
    assert size.usd_per_million_output == pytest.approx(3.0 / (32 * 200 * 3600) * 1e6)
    with pytest.raises(ValueError, match="positive capacity"):
        size_fleet(0.0, 1, 200.0, FleetSpec(), 3.0)


def test_the_report_prices_the_start_and_the_winner(fp8_run: TuneRun) -> None:
    data = gather(RunFolder(fp8_run.folder))
    assert data.start is not None and data.final is not None
    # The client asks to ignore EOS: every answer is as long as the workload asks.
    (chat,) = data.study.workload.classes
    tokens = output_per_request(data.final.result, data.study.workload)
    assert tokens == mean_length_tokens(chat.output_tokens)
    report = (fp8_run.folder / "report.md").read_text()
    section = report.split("## Fleet and price", 1)[1].split("\n## ", 1)[0]
    assert "$3.00 per GPU-hour" in section  # the catalogue's H100 price
    rows = [line for line in section.splitlines() if line.startswith("| start") or
            line.startswith("| winner")]  # fmt: skip
    assert len(rows) == 2 and all("$" in row for row in rows)
    assert "Per million output tokens the winner costs" in section


def test_the_saving_is_said_in_dollars_either_way() -> None:
    spec = FleetSpec(peak_rps=200.0)
    start = size_fleet(36.86, 1, 200.0, spec, 2.5)
    winner = size_fleet(45.66, 1, 200.0, spec, 2.5)
    assert saving(start, winner) == ("The winner needs 6 GPUs where the start needs 7: $2.50 "
                                     "less an hour, $21,900 less a year.")  # fmt: skip
    # A tensor-parallel winner that needs more GPUs costs more, and says so.
    wide = size_fleet(60.0, 2, 200.0, spec, 2.5)
    assert saving(start, wide) == ("The winner needs 10 GPUs where the start needs 7: $7.50 "
                                   "more an hour, $65,700 more a year.")  # fmt: skip
    same = size_fleet(38.0, 1, 200.0, spec, 2.5)
    assert saving(start, same).startswith("The same 7 GPUs; per million output tokens")
    assert saving(size_fleet(40.0, 1, 200.0, FleetSpec(), None), winner) == (
        "No price, so no saving in dollars.")  # fmt: skip
