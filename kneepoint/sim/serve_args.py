"""`kneepoint sim serve` arguments: our own (GPU, model, where to listen) plus `vllm serve`'s
flags for what the simulator models, spelled exactly as vLLM spells them.

Flags the simulator does not model are refused by name rather than silently ignored: a
simulated server that quietly differed from the command line would mislead every measurement.
"""

from __future__ import annotations

import argparse
import socket
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from kneepoint.config import (
    ConfigError,
    Problem,
    arguments,
    exact_key,
    family_key,
    gpu_catalogue,
    model_catalogue,
    prefix_keys,
    read_mapping,
    validate,
)
from kneepoint.records import (
    Calibration,
    Efficiency,
    EngineConfig,
    Faults,
    GpuSpec,
    ModelSpec,
    flag_for,
    knob_fields,
)

# vLLM flags that change nothing the simulator models, accepted so real command lines work.
_HARMLESS = ("--disable-log-requests", "--disable-log-stats", "--trust-remote-code")
_HARMLESS_WITH_VALUE = ("--load-format", "--dtype", "--seed", "--uvicorn-log-level")
# vLLM's short aliases of modeled flags.
_ALIASES = {"tensor_parallel_size": ["-tp"], "quantization": ["-q"]}


@dataclass(frozen=True)
class ServeArgs:
    gpu: GpuSpec
    model: ModelSpec
    served_model_name: str
    engine: EngineConfig
    host: str
    port: int
    efficiency: Efficiency | None = None
    """The roofline's constants from ``--calibration`` (None: the built-in ones)."""
    faults: Faults = field(default_factory=Faults)
    """What ``--fault-*`` asks the server to break (nothing by default)."""


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", required=True, help="GPU from configs/gpus.yaml (or a prefix)")
    parser.add_argument("--model", required=True, help="model from configs/models.yaml")
    parser.add_argument("--served-model-name", help="name clients use (default: --model)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (loopback default)")
    parser.add_argument("--port", type=arguments.port, default=8000)
    parser.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="a `kneepoint calibrate` file fitted on this GPU and model",
    )
    parser.add_argument(
        "--api-key",
        help="answer /v1 only with `Authorization: Bearer KEY`, as "
        "vLLM does (default: $VLLM_API_KEY; neither: no key)",
    )
    hints = typing.get_type_hints(EngineConfig)
    for name in knob_fields():
        flags = [flag_for(name), *_ALIASES.get(name, [])]
        if hints[name] in (bool, bool | None):
            parser.add_argument(*flags, dest=f"knob_{name}", action=argparse.BooleanOptionalAction)
        else:
            parser.add_argument(*flags, dest=f"knob_{name}", metavar="VALUE")
    _add_fault_arguments(parser)
    for flag in _HARMLESS:
        parser.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in _HARMLESS_WITH_VALUE:
        parser.add_argument(flag, help=argparse.SUPPRESS)


def _add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """``--fault-NAME`` for every field of ``Faults`` but ``launches`` (the launcher picks the
    launches; a server is one launch)."""
    group = parser.add_argument_group("faults (kneepoint.records.faults)")
    for name, spec in Faults.model_fields.items():
        if name == "launches":
            continue
        flag = "--fault-" + name.replace("_", "-")
        if spec.annotation is bool:
            group.add_argument(
                flag, dest=f"fault_{name}", action="store_true", help=spec.description
            )
        else:
            group.add_argument(flag, dest=f"fault_{name}", metavar="VALUE", help=spec.description)


def _faults(args: argparse.Namespace) -> Faults:
    values = {
        name: getattr(args, f"fault_{name}")
        for name in Faults.model_fields
        if name != "launches" and getattr(args, f"fault_{name}") not in (None, False)
    }
    try:
        return Faults.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = str(first["loc"][0]) if first["loc"] else "fault"
        raise _bad("--fault-" + loc.replace("_", "-"), first["msg"]) from exc


def _pick(catalogue: dict[str, typing.Any], name: str, what: str) -> typing.Any:
    """As a study's ``gpu`` and ``model`` read a catalogue name (``config.catalog``); a model
    of a catalogue entry's family is served under the id given."""
    key = exact_key(catalogue, name)
    family = None if key is not None else family_key(catalogue, name)
    if family is not None:
        return catalogue[family].model_copy(update={"hf_id": name})
    matches = (key,) if key is not None else prefix_keys(catalogue, name)
    if len(matches) == 1:
        return catalogue[matches[0]]
    known = ", ".join(sorted(matches or catalogue))
    said = "ambiguous" if matches else "unknown"
    shown = "GPU" if what == "gpu" else what  # the study's words for the same refusal
    raise _bad(f"--{what}", f"{said} {shown} {name!r} (catalogue: {known})")


def _bad(flag: str, message: str) -> ConfigError:
    return ConfigError([Problem("kneepoint sim serve", None, None, f"{flag}: {message}")])


def resolve_serve_args(args: argparse.Namespace, unknown: Sequence[str]) -> ServeArgs:
    """Check the parsed arguments; a ConfigError names the first bad flag."""
    for extra in unknown:
        if extra.startswith("-"):
            flag = extra.split("=", 1)[0]
            raise _bad(flag, "not modeled by the simulator (modeled: see --help)")
        raise _bad(extra, "unexpected argument")
    gpu = _pick(gpu_catalogue(), args.gpu, "gpu")
    model = _pick(model_catalogue(), args.model, "model")
    values = {
        name: getattr(args, f"knob_{name}")
        for name in knob_fields()
        if getattr(args, f"knob_{name}") is not None
    }
    try:
        engine = EngineConfig.model_validate({"model": model.hf_id or args.model, **values})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"][0] if first["loc"] else ""
        flag = flag_for(str(loc)) if loc else "engine"
        raise _bad(flag, first["msg"]) from exc
    name = args.served_model_name or args.model
    efficiency = _calibrated(args.calibration, gpu, model)
    return ServeArgs(gpu, model, name, engine, args.host, args.port, efficiency, _faults(args))


def _calibrated(path: Path | None, gpu: GpuSpec, model: ModelSpec) -> Efficiency | None:
    """The constants of a calibration file, fitted on this GPU and model (else refused)."""
    if path is None:
        return None
    if not path.is_file():
        raise _bad("--calibration", f"no such file: {path}")
    doc = read_mapping(path)
    found = validate(Calibration, doc.data, doc)
    if (found.gpu, found.model) != (gpu.name, model.name):
        raise _bad(
            "--calibration",
            f"{path} was fitted for {found.gpu} / {found.model}, not {gpu.name} / {model.name}",
        )
    return found.efficiency


def bind_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host:port`` (a port in use otherwise ends in
    uvicorn's log line and exit 3), bound as uvicorn binds (SO_REUSEADDR); None if it
    can."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return f"{host}:{port}: {exc.strerror or exc}"
    return None
