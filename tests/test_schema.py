"""`kneepoint config schema`: a JSON Schema that accepts the shipped studies as written."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from kneepoint.cli.main import main
from kneepoint.config import study_file_schema

from .conftest import CONFIGS


@pytest.mark.parametrize("path", sorted((CONFIGS / "studies").glob("*.yaml")), ids=str)
def test_shipped_studies_validate_against_the_schema(path: Path) -> None:
    jsonschema.validate(yaml.safe_load(path.read_text()), study_file_schema())


def test_schema_rejects_unknown_keys() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "gpu": "h100-sxm", "bogus": 1}, study_file_schema())


def test_schema_command_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "study.schema.json"
    assert main(["config", "schema", "--output", str(out)]) == 0
    schema = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == "kneepoint study file"
    assert [p.name for p in out.parent.iterdir()] == ["study.schema.json"]  # no temp files left
