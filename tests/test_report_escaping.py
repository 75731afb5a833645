"""The HTML report escapes everything it shows: text from the study, the ledger, the server
(failure causes, reasons, commands) reaches the page as text, never as markup."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from kneepoint.config import ConfigError, load_study
from kneepoint.report import write_report
from kneepoint.report.document import (
    Bullets,
    Code,
    Document,
    Heading,
    Image,
    Paragraph,
    Table,
    to_html,
)
from kneepoint.run.folder import RunFolder

from .conftest import QUICKSTART, TuneRun

PAYLOAD = '<script>alert(1)</script>"onmouseover="alert(2)'


def _no_markup_from(page: str) -> None:
    assert "<script>alert" not in page
    assert '"onmouseover=' not in page and 'onmouseover="alert' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;onmouseover=&quot;alert(2)" in page


def test_every_block_escapes_its_text(tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    Figure().savefig(png)
    doc = Document(PAYLOAD)
    doc.add(Heading(PAYLOAD), Paragraph(PAYLOAD), Bullets([PAYLOAD]),
            Table([PAYLOAD], [[PAYLOAD]]), Code(PAYLOAD), Image(png, PAYLOAD))  # fmt: skip
    page = to_html(doc)
    _no_markup_from(page)
    # title, h1, h2, p, li, th, td, code, alt and figcaption: every one escaped
    assert page.count("&lt;script&gt;alert(1)") == 10


def test_a_study_name_cannot_carry_markup() -> None:
    # the name also names the run folder: it is refused, not escaped
    with pytest.raises(ConfigError, match="name"):
        load_study(QUICKSTART, [f"name='{PAYLOAD}'"])


def _poison(ledger: Path) -> int:
    """Put the payload into every reason and failure cause the ledger holds."""
    lines, poisoned = [], 0
    for line in ledger.read_text().splitlines():
        event = json.loads(line)
        for holder in (event, event.get("outcome"), event.get("proposal")):
            if not isinstance(holder, dict):
                continue
            for key in ("reason", "detail"):
                free_text = not (event["event"] == "finished" and key == "reason")
                if free_text and isinstance(holder.get(key), str):
                    holder[key] = f"{holder[key]} {PAYLOAD}"
                    poisoned += 1
        lines.append(json.dumps(event))
    ledger.write_text("\n".join(lines) + "\n")
    return poisoned


def test_the_report_of_a_run_with_markup_in_its_reasons_shows_it_as_text(
    fp8_run: TuneRun, tmp_path: Path
) -> None:
    folder = tmp_path / fp8_run.folder.name
    shutil.copytree(fp8_run.folder, folder)
    assert _poison(folder / "ledger.jsonl") >= 3
    _, html_path = write_report(RunFolder.existing(folder))
    page = html_path.read_text()
    _no_markup_from(page)
