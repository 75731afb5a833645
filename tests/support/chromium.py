"""Headless Chromium, as the report tests render the HTML report in it (Debian's package;
.ci/run installs it)."""

from __future__ import annotations

import os
import shutil

import pytest

HEADLESS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def chromium() -> str:
    """The browser's path; CI fails without it, elsewhere the test is skipped."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must install chromium (.ci/run does) to render the report")
        pytest.skip("chromium is not installed here")
    return found
