"""Fuzzed study files never produce a traceback: each is valid (exit 0) or refused with exit 2
and one ``kneepoint: ...`` line per problem, through the real command-line entry.

The documents are the shipped studies mutated (fields dropped or replaced by junk of every
type: huge, negative, NaN and infinite numbers, unicode text, nested lists and mappings,
unknown keys), the same with raw YAML spliced in (anchors and aliases, alias bombs, nesting
thousands deep, numbers past what Python reads, odd tags), other YAML top levels, random text
and random bytes, with random ``--set`` overrides beside them. Each goes through ``kneepoint
config check`` and through ``kneepoint tune`` up to the moment it would create the run folder
(``RunFolder.create`` is replaced by a sentinel there), so no server starts and no simulation
runs. Hugging Face config.json files of wrong types, huge numbers and deep nesting go
through ``config check`` as a study's model.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kneepoint.cli.main import main
from kneepoint.config import load_study
from kneepoint.measure import study_knee
from kneepoint.records.limits import MAX_POINT_REQUESTS
from kneepoint.run.folder import RunFolder

from .conftest import CONFIGS, QUICKSTART

STUDIES = sorted((CONFIGS / "studies").glob("*.yaml"))
BASES: list[dict[str, Any]] = [yaml.safe_load(p.read_text()) for p in STUDIES]

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 2**63, -(2**63), 10**400, 0.0, -0.0, 1e308, -1e-308]),
    st.floats(allow_nan=True, allow_infinity=True),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _text,
                     st.sampled_from(["07:00", "2020-01-01T00:00:00", "chat", "h100-sxm",
                                      "llama-3.1-8b", "vllm", "sim", "http", "../../etc",
                                      "/dev/null", "x" * 300, "a/" * 150]))  # fmt: skip
_junk = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(_text, st.integers(-3, 3)), inner, max_size=4),
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value in a YAML tree (mapping keys and list indices)."""
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _paths(child, (*prefix, index))


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def _mutated(draw: st.DrawFn) -> Any:
    """A shipped study with a few fields dropped, replaced or added."""
    doc = yaml.safe_load(yaml.safe_dump(draw(st.sampled_from(BASES))))  # a deep copy
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths or not isinstance(doc, dict):
            break
        path = draw(st.sampled_from(paths))
        parent, key = _parent(doc, path), path[-1]
        action = draw(st.sampled_from(["drop", "replace", "replace", "add"]))
        if action == "drop":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(_junk)
        elif isinstance(parent, dict):
            parent[draw(_text)] = draw(_junk)
        else:
            parent.append(draw(_junk))
    return doc


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False).encode()


_BOMB = (
    "["
    + ", ".join(
        f"&{name} [{', '.join([item] * 9)}]"
        for item, name in zip(["lol", *(f"*{c}" for c in "abcdefgh")], "abcdefghi", strict=True)
    )
    + "]"
)
"""One flow value holding nine levels of nine aliases (a billion strings, expanded)."""
_fragments = st.one_of(
    st.integers(1, 6000).map(lambda n: "9" * n),  # past Python's 4,300-digit int() limit
    st.sampled_from(["1e99999", "-1e-99999", ".inf", "-.inf", ".nan", "0x" + "f" * 5000,
                     "0o777", "1_000", "0b101", "2001-12-14", "!!int 3.5", "!!float abc",
                     "!!timestamp xyz", "!!binary ###", "!!set {a, b}", "!!omap [a: 1]",
                     "!!python/object:os.system x", "{<<: {a: 1}}", "~", "'\\x00'"]),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),  # deep nesting
    st.integers(1, 3000).map(lambda n: "{a: " * n + "1" + "}" * n),
)  # fmt: skip


@st.composite
def _raw(draw: st.DrawFn) -> bytes:
    """A mutated study with YAML only text can say spliced into its values: an anchor on
    one and its alias on another (a plain value, or an alias bomb), deep nesting, numbers
    past what Python reads, tags PyYAML's constructors choke on."""
    doc = draw(_mutated())
    leaves = [p for p in _paths(doc) if p and not isinstance(_parent(doc, p)[p[-1]], dict | list)]
    if not isinstance(doc, dict) or len(leaves) < 2:
        return _dump(doc)
    first, second = draw(st.lists(st.sampled_from(leaves), min_size=2, max_size=2, unique=True))
    anchored = draw(st.one_of(_junk.map(json.dumps), st.just(_BOMB), _fragments))
    _parent(doc, first)[first[-1]] = "__kp_first__"
    _parent(doc, second)[second[-1]] = "__kp_second__"
    text = _dump(doc).decode()
    aliased = draw(st.booleans())
    second_text = "*a" if aliased else draw(_fragments)
    first_text = f"&a {anchored}" if aliased and anchored != _BOMB else anchored
    if anchored == _BOMB:
        second_text = "*i" if aliased else second_text
    return text.replace("__kp_first__", first_text).replace("__kp_second__", second_text).encode()


_documents = st.one_of(
    _mutated().map(_dump),
    _mutated().map(_dump),
    _raw(),
    _raw(),
    _junk.map(_dump),  # a top level that is rarely a mapping
    _text.map(str.encode),  # text that is rarely YAML
    st.binary(max_size=64),  # junk bytes, invalid UTF-8 among them
)
_overrides = st.lists(
    st.one_of(
        st.builds(lambda p, v: f"{'.'.join(map(str, p))}={v}",
                  st.sampled_from([p for base in BASES for p in _paths(base) if p]),
                  _junk.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip())),
        _text,
    ),
    max_size=2,
)  # fmt: skip


class _LaunchError(Exception):
    """Raised where `kneepoint tune` would create the run folder and start its baseline."""


def _run(argv: list[str]) -> tuple[int | None, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code: int | None = main(argv)
        except _LaunchError:
            code = None
        except SystemExit as exc:  # argparse's usage errors (`--set -:` has no value): the
            code = int(exc.code or 0)  # console script exits with them, its line said
    return code, err.getvalue()


def _assert_clean(code: int | None, err: str, allowed: set[int | None]) -> None:
    assert code in allowed, err
    assert "Traceback" not in err
    if code == 2:
        lines = err.splitlines()
        assert lines, "exit 2 without a line saying why"
        assert all(line.startswith("kneepoint: ") for line in lines), err


@pytest.fixture(scope="module")
def study_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "study.yaml"


# too_slow: the shipped studies are mutated several times per example, which generates more
# data than hypothesis expects of a test; each example still runs in milliseconds.
_FUZZ = {"deadline": None, "derandomize": True, "database": None,
         "suppress_health_check": [HealthCheck.too_slow]}  # fmt: skip


@settings(max_examples=120, **_FUZZ)  # the fast tier's share: ~4 s
@given(document=_documents, overrides=_overrides)
def test_no_study_file_gets_a_traceback(
    study_file: Path, document: bytes, overrides: list[str]
) -> None:
    _config_check_and_tune_agree(study_file, document, overrides)


@pytest.mark.slow  # ~1,000 examples, ~1 min
@settings(max_examples=1000, **_FUZZ)
@given(document=_documents, overrides=_overrides)
def test_no_study_file_gets_a_traceback_at_length(
    study_file: Path, document: bytes, overrides: list[str]
) -> None:
    _config_check_and_tune_agree(study_file, document, overrides)


def _config_check_and_tune_agree(study_file: Path, document: bytes, overrides: list[str]) -> None:
    study_file.write_bytes(document)
    sets = [arg for text in overrides for arg in ("--set", text)]
    code, err = _run(["config", "check", str(study_file), *sets])
    _assert_clean(code, err, {0, 2})
    with mock.patch.object(RunFolder, "create", side_effect=_LaunchError):
        tuned, tune_err = _run(["tune", str(study_file), "--runs-dir",
                                str(study_file.parent / "runs"), *sets])  # fmt: skip
    _assert_clean(tuned, tune_err, {None, 2})
    # config check and tune read the same study through the same checks
    assert (tuned is None) == (code == 0), (err, tune_err)


@pytest.mark.parametrize("base", BASES, ids=[p.stem for p in STUDIES])
def test_the_unmutated_studies_go_through_both(study_file: Path, base: dict[str, Any]) -> None:
    """The fuzzer starts from valid studies, which reach the point where tune would launch."""
    study_file.write_bytes(_dump(base))
    assert _run(["config", "check", str(study_file)])[0] == 0
    with mock.patch.object(RunFolder, "create", side_effect=_LaunchError):
        assert _run(["tune", str(study_file), "--runs-dir", str(study_file.parent)])[0] is None


_LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([item] * 9)}]\n"
    for item, name in zip(['"lol"', *(f"*{c}" for c in "abcdefgh")], "abcdefghi", strict=True)
)
"""Nine levels of nine aliases: 1 KB of YAML that a full repr expands to 9**9 strings."""
_DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("document", "overrides"),
    [
        (_LAUGHS + "name: *i\n", []),
        (_LAUGHS + "seed: *i\nname: x\n", []),
        (f"name: x\nseed: {_DEEP}\n", []),
        ("name: x\n", [f"seed={_DEEP}"]),
        (f"name: x\nobjective: {{kind: {_BOMB}}}\n", []),
        ("name: x\nseed: &a [*a]\n", []),
        (f"name: x\nseed: {'9' * 5000}\n", []),
        (f"name: x\nseed: 0x{'f' * 5000}\n", []),
        ("name: x\nseed: !!int 3.5\n", []),
        ("name: x\nseed: !!timestamp xyz\n", []),
    ],
    ids=[
        "aliases-as-name",
        "aliases-as-seed",
        "deep-study",
        "deep-set",
        "bomb-as-tag",
        "holds-itself",
        "5000-digits",
        "huge-hex",
        "bad-int-tag",
        "bad-timestamp",
    ],
)
def test_hostile_yaml_is_refused_in_one_line_each(
    study_file: Path, document: str, overrides: list[str]
) -> None:
    """Aliases that expand a billion-fold (config check hung building the whole repr of the
    value to quote 60 characters of it; as a tagged union's tag, pydantic's own message took
    140 s and 18 GB), nesting deeper than the parser recurses (a RecursionError traceback),
    an alias inside its own anchor, integers past Python's 4,300-digit limit and scalars
    their tag cannot hold (ValueError tracebacks) are one line per problem, exit 2."""
    study_file.write_text(document)
    sets = [arg for text in overrides for arg in ("--set", text)]
    code, err = _run(["config", "check", str(study_file), *sets])
    _assert_clean(code, err, {2})


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"hidden_size": "4096"}, "hidden_size"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"hidden_size": 1e400}, "hidden_size"),
        ({"text_config": {"x": [[[[1]]]]}, "num_hidden_layers": "many"}, "num_hidden_layers"),
        ({"num_hidden_layers": 10**300}, "num_layers"),
        ({"vocab_size": "__digits__"}, "4300"),
    ],
    ids=[
        "string-size",
        "zero-heads",
        "infinite-size",
        "string-layers",
        "huge-layers",
        "5000-digits",
    ],
)
def test_a_model_config_with_wrong_types_is_one_line_per_problem(
    tmp_path: Path, changes: dict[str, Any], said: str
) -> None:
    """A Hugging Face config.json with a size as a string or zero heads gave a TypeError or
    ZeroDivisionError traceback; each is now a line naming the file and the field."""
    config = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
              "max_position_embeddings": 2048, **changes}  # fmt: skip
    text = json.dumps(config).replace("Infinity", "1e400")
    (tmp_path / "config.json").write_text(text.replace('"__digits__"', "9" * 5000))
    (tmp_path / "deep.json").write_text(_DEEP)
    base = yaml.safe_load((CONFIGS / "studies" / "quickstart.yaml").read_text())
    for model, expected in (("config.json", said), ("deep.json", "nested too deeply")):
        study = tmp_path / "study.yaml"
        study.write_text(yaml.safe_dump({**base, "model": str(tmp_path / model)}))
        code, err = _run(["config", "check", str(study)])
        _assert_clean(code, err, {2})
        assert expected in err, err


_HF_CONFIG = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
              "max_position_embeddings": 2048, "text_config": {"head_dim": 64}}  # fmt: skip
_json_fragments = st.one_of(
    st.integers(1, 6000).map(lambda n: "9" * n),  # past Python's 4,300-digit int() limit
    st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", "-0", "1.5", "true", "null", '""',
                     '"4096"', "[]", "{}", '"\\ud800"']),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    _junk.map(json.dumps),
)  # fmt: skip


@st.composite
def _hf_configs(draw: st.DrawFn) -> str:
    """A config.json with a few of its values (or the nested text_config's) replaced by
    JSON text of another type, size or depth."""
    doc: dict[str, Any] = json.loads(json.dumps(_HF_CONFIG))
    keys = draw(st.lists(st.sampled_from([*_HF_CONFIG, "text_config.head_dim"]), max_size=3,
                         unique=True))  # fmt: skip
    for index, key in enumerate(keys):
        owner = doc["text_config"] if key.startswith("text_config.") else doc
        if isinstance(owner, dict):  # not where text_config itself was replaced
            owner[key.split(".")[-1]] = f"__kp{index}__"
    text = json.dumps(doc)
    for index in range(len(keys)):
        text = text.replace(f'"__kp{index}__"', draw(_json_fragments))
    return text


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(config=_hf_configs())
def test_no_model_config_gets_a_traceback(study_file: Path, config: str) -> None:
    model = study_file.parent / "config.json"
    model.write_text(config)
    base = yaml.safe_load((CONFIGS / "studies" / "quickstart.yaml").read_text())
    study_file.write_text(yaml.safe_dump({**base, "model": str(model)}))
    code, err = _run(["config", "check", str(study_file)])
    _assert_clean(code, err, {0, 2})


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("tuning.start_rps=1e9", "tuning.start_rps"),
        ("tuning.validate_seconds=1e12", "tuning.validate_seconds"),
        ("objective={kind: goodput_at_rate, rate_rps: 1e9}", "objective.rate_rps"),
        ("tuning.start_rps=1000", "tuning: start_rps x the longest point plans"),
    ],
)
def test_rates_and_durations_no_machine_can_hold_are_refused(
    study_file: Path, override: str, field: str
) -> None:
    """They passed `config check`, then `tune` died of MemoryError planning the first point
    (issue "Step 13")."""
    study_file.write_bytes(_dump(BASES[STUDIES.index(CONFIGS / "studies" / "quickstart.yaml")]))
    sets = ["--set", override, "--set", "tuning.validate_seconds=3600"] if "1000" in override \
        else ["--set", override]  # fmt: skip
    code, err = _run(["config", "check", str(study_file), *sets])
    _assert_clean(code, err, {2})
    assert field in err, err


def test_a_search_climbs_no_higher_than_a_point_can_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first point was bounded, the climb was not: an hour-long point doubling from
    1 req/s toward 10,000 on a server that kept up would have planned 36M requests."""
    study = load_study(QUICKSTART, ["tuning.screen_seconds=3600"])
    asked: dict[str, Any] = {}
    monkeypatch.setattr(study_knee, "knee_search", lambda *a, **k: asked.update(k))
    study_knee.study_knee_search(mock.Mock(), study, study.engine)
    assert asked["max_rps"] == pytest.approx(MAX_POINT_REQUESTS / 3600)
    assert study.tuning.max_rate_rps * 3600 <= MAX_POINT_REQUESTS
