"""Shared test fixtures and paths."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
QUICKSTART = CONFIGS / "studies" / "quickstart.yaml"
