"""Validate raw YAML data into a record, translating pydantic's errors at this edge.

Pydantic reports locations in its own terms (union tags such as ``fixed`` or ``datetime``
appear in the path) and messages written for programmers. Users get the field path as written
in their file, the file's line, "did you mean" for unknown keys, and the offending value.
"""

from __future__ import annotations

import difflib
import re
import reprlib
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from kneepoint.config.errors import ConfigError, Loc, Problem
from kneepoint.config.yamlio import YamlDoc

M = TypeVar("M", bound=BaseModel)

# A cross-field validator names the field it blames as "<path>: <problem>"; see records.study.
_LEADING_PATH = re.compile(r"^([A-Za-z_][\w\-]*(?:\.[\w\-]+|\[\d+\])*): (.+)$", re.DOTALL)
_PATH_PART = re.compile(r"[^.\[\]]+|\[\d+\]")

SourceOf = Callable[[Loc], tuple[str, int | None]]


def validate(
    cls: type[M],
    data: Any,
    doc: YamlDoc,
    context: Mapping[str, Any] | None = None,
    source_of: SourceOf | None = None,
) -> M:
    """``cls.model_validate(data)``, or a ConfigError with one problem per bad field."""
    try:
        return cls.model_validate(data, context=dict(context or {}))
    except ValidationError as exc:
        locate = source_of or (lambda loc: (doc.source, doc.line_of(loc)))
        described = [_describe(cls, data, error) for error in exc.errors()]
        locs = [loc for loc, _ in described]
        problems: list[Problem] = []
        seen: set[Loc] = set()
        for loc, message in described:
            if loc in seen:  # a union reports once per member; the first says enough
                continue
            if any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs):
                continue  # a container's summary of its items' errors, already reported
            seen.add(loc)
            source, line = locate(loc)
            problems.append(Problem(source, line, loc, message))
        raise ConfigError(problems) from None


def _describe(cls: type[BaseModel], data: Any, error: ErrorDetails) -> tuple[Loc, str]:
    loc = clean_loc(error["loc"], data)
    kind, message = error["type"], error["msg"]
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind == "extra_forbidden":
        return loc, _unknown_key_message(cls, loc, data)
    if kind == "missing":
        return loc, "required field is missing"
    if kind == "value_error" and (found := _LEADING_PATH.match(message)):
        sub = _split_path(found.group(1))
        if _exists(data, (*loc, *sub[:1])):
            return (*loc, *sub), found.group(2)
    message = message.replace("Input should be", "must be").replace("input should be", "must be")
    if kind not in {"value_error", "model_type", "dict_type"} and "input" in error:
        message += f" (got {_show(error['input'])})"
    return loc, message


def clean_loc(loc: Sequence[str | int], data: Any) -> Loc:
    """Drop the parts of a pydantic loc that are not keys of the data (union tags)."""
    cleaned: list[str | int] = []
    node: Any = data
    for part in loc:
        child = _get(node, part)
        if child is _MISSING and isinstance(node, dict) and node.get("kind") == part:
            continue  # the tag of a discriminated union
        if child is _MISSING and _is_scalar(node) and isinstance(part, str):
            continue  # a scalar checked against each member of a union
        node = None if child is _MISSING else child
        cleaned.append(part)
    return tuple(cleaned)


_MISSING = object()


def _get(node: Any, part: str | int) -> Any:
    """``node[part]`` for a mapping key or list index that exists, else ``_MISSING``."""
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return _MISSING


def _is_scalar(node: Any) -> bool:
    return node is not None and not isinstance(node, list | dict)


def _split_path(text: str) -> Loc:
    return tuple(int(p[1:-1]) if p.startswith("[") else p for p in _PATH_PART.findall(text))


def _exists(data: Any, loc: Loc) -> bool:
    node = data
    for part in loc:
        node = _get(node, part)
        if node is _MISSING:
            return False
    return True


def _show(value: Any) -> str:
    """A value as an error message quotes it: at most 60 characters, built without walking
    more of it than that needs (a 1 KB YAML of nested aliases expands to 9**9 strings)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Shown(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int past 4,300 digits raises (YAML's 0xfff... reads past the limit)
        if x.bit_length() > 1000:
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1:,} digits>"
        return repr(x)


_SHOWN = _Shown()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 3, 6, 6, 4
_SHOWN.maxstring, _SHOWN.maxother = 60, 60


def _unknown_key_message(cls: type[BaseModel], loc: Loc, data: Any) -> str:
    key = str(loc[-1]) if loc else "?"
    allowed = _fields_at(cls, loc[:-1], data)
    if not allowed:
        return f"unknown key {key!r}"
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    return f"unknown key {key!r} (expected one of: {', '.join(allowed)})"


def _fields_at(cls: type[BaseModel], path: Loc, data: Any) -> list[str] | None:
    """Field names of the record at ``path`` inside ``cls``, following the data's union tags."""
    annotation: Any = cls
    node: Any = data
    for part in path:
        model = _pick_model(annotation, node)
        if model is not None:
            field = model.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        else:
            args = get_args(_unwrap(annotation))
            if not args:
                return None
            annotation = args[-1] if get_origin(_unwrap(annotation)) is dict else args[0]
        node = _get(node, part)
    model = _pick_model(annotation, node)
    return list(model.model_fields) if model is not None else None


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _pick_model(annotation: Any, node: Any) -> type[BaseModel] | None:
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) not in (Union, types.UnionType):
        return None
    members = [m for m in map(_unwrap, get_args(annotation)) if isinstance(m, type)]
    models = [m for m in members if issubclass(m, BaseModel)]
    if len(models) == 1:
        return models[0]
    tag = node.get("kind") if isinstance(node, dict) else None
    for model in models:
        field = model.model_fields.get("kind")
        if field is not None and field.default == tag:
            return model
    return None
