"""Is the server answering the one the study describes? Read from its own ``/v1/models`` (the
model it serves, under which name, and its max_model_len) and ``vllm:cache_config_info``.

A launched server is checked against the configuration it was started with (its name,
max_model_len and cache knobs); an attached one against the study's model and, where the
study sets one, its max_model_len. A mismatch is refused before any load: a report on a 70B
drawn from an 8B server's measurements is worse than none.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

import httpx

from kneepoint.probes.client import PageTooLargeError, bearer, capped_text, tls_context
from kneepoint.probes.server.server_failure import Failure, ServerFailedError
from kneepoint.probes.telemetry import parse_metrics
from kneepoint.records import EngineConfig


@dataclass(frozen=True, slots=True)
class ModelCard:
    """One entry of ``/v1/models``: the name clients use, the model it was loaded from
    (vLLM's ``root``: the path or Hugging Face id given to ``vllm serve``) and its context."""

    id: str
    root: str | None = None
    max_model_len: int | None = None

    def serves(self, model: str) -> bool:
        """Whether this card is ``model`` (a Hugging Face id, a path or a catalogue name),
        by exact name or by the words of one final path part running on in the other's:
        ``Llama-3.1-8B`` is ``meta-llama/Llama-3.1-8B-Instruct`` and ``/models/llama-3.1-8b``;
        ``Llama-3.1-70B`` is neither. Where the card names what it loaded, that decides:
        a server whose alias is ``llama`` serves whichever Llama its root names."""
        if model in (self.id, self.root):
            return True
        return _runs_in(_words(model), _words(self.root or self.id))

    def words(self) -> str:
        loaded = f" (loaded from {self.root})" if self.root and self.root != self.id else ""
        return f"'{self.id}'{loaded}"


def _words(name: str) -> tuple[str, ...]:
    stem = PurePosixPath(name.rstrip("/")).name.lower() or name.lower()
    return tuple(w for w in re.split(r"[-_.\s]+", stem) if w)


def _runs_in(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether the shorter of ``a`` and ``b`` appears, word after word, in the other."""
    short, long = sorted((a, b), key=len)
    return bool(short) and any(
        long[i : i + len(short)] == short for i in range(len(long) - len(short) + 1)
    )


def model_cards(body: object) -> list[ModelCard]:
    """The models an OpenAI-style ``/v1/models`` answer lists (``{"data": [{"id": ...},
    ...]}``); ValueError naming what is off where it has another shape. A ``root`` or
    ``max_model_len`` of the wrong type is left out: other servers need not say them."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError(f"no list of models under 'data' in {str(body)[:80]}")
    cards = []
    for entry in data:
        name = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            raise ValueError(f"a model without a string 'id' in {str(data)[:80]}")
        root, length = entry.get("root"), entry.get("max_model_len")
        cards.append(
            ModelCard(
                name,
                root if isinstance(root, str) and root else None,
                length
                if isinstance(length, int) and not isinstance(length, bool) and length > 0
                else None,
            )
        )
    return cards


def attached_card(url: str, cards: list[ModelCard], config: EngineConfig) -> ModelCard:
    """The card of an attached server that serves the study's model at the study's
    max_model_len (where the study sets one); ServerFailedError naming both where none does."""
    if not cards:
        raise ServerFailedError(Failure("crashed", f"{url} serves no model", None, ()))
    card = next((c for c in cards if c.serves(config.model)), None)
    if card is None:
        served = ", ".join(c.words() for c in cards)
        message = (
            f"wrong server at {url}: it serves {served}, the study's model is "
            f"{config.model}: name the model it serves (--model), or, where it is this "
            f"model under another name, set engine.model to the name it serves"
        )
        raise ServerFailedError(Failure("wrong_server", message, None, ()))
    mismatch = length_mismatch(card, config)
    if mismatch:
        raise ServerFailedError(Failure("wrong_server", f"{url}: {mismatch}", None, ()))
    return card


def length_mismatch(card: ModelCard, config: EngineConfig) -> str | None:
    """Words for a server whose max_model_len is not the study's (None: the same, or one of
    them does not say)."""
    asked, runs = config.max_model_len, card.max_model_len
    if asked is None or runs is None or asked == runs:
        return None
    return (
        f"the server runs max_model_len {runs:,}, the study says {asked:,}: set "
        f"engine.max_model_len to {runs} (or leave it out)"
    )


def check_identity(
    url: str, served: str, config: EngineConfig, api_key: str | None = None
) -> tuple[str, ...]:
    """Raise unless a launched server lists ``served`` at the asked max_model_len and its
    ``cache_config_info`` agrees with the knobs asked for; returns notes on what could not
    be checked."""
    metrics: str | None = None
    try:
        with httpx.Client(timeout=10.0, headers=bearer(api_key), verify=tls_context()) as client:
            cards = model_cards(client.get(f"{url}/v1/models").json())
            with contextlib.suppress(PageTooLargeError):
                _, metrics = capped_text(client, f"{url}/metrics")
    except httpx.TimeoutException as exc:
        hung = Failure("hung", f"healthy, then no answer: {exc!r}", None, ())
        raise ServerFailedError(hung) from exc
    except (httpx.HTTPError, ValueError) as exc:
        what = f"{url}/v1/models does not answer as vLLM does: {exc!r}"
        raise ServerFailedError(Failure("crashed", what, None, ())) from exc
    card = next((c for c in cards if c.id == served), None)
    if card is None:
        names = [c.id for c in cards]
        raise ServerFailedError(
            Failure(
                "wrong_server", f"wrong server at {url}: serves {names}, not {served}", None, ()
            )
        )
    mismatches = [m for m in (length_mismatch(card, config),) if m]
    if metrics is None:
        return _refused(mismatches, "/metrics is larger than kneepoint reads")
    try:
        labels = parse_metrics(metrics).labels("cache_config") or {}
    except ValueError:  # measured without the engine's signals: the load points say so
        return _refused(mismatches, "/metrics does not parse as Prometheus text")
    if not labels:
        return _refused(mismatches, "no vllm:cache_config_info")
    return _refused(mismatches + config_mismatches(labels, config), "")


def _refused(mismatches: list[str], unchecked: str) -> tuple[str, ...]:
    if mismatches:
        message = "the server runs a different configuration: " + "; ".join(mismatches)
        raise ServerFailedError(Failure("wrong_server", message, None, ()))
    return (f"{unchecked}: nothing to check against",) if unchecked else ()


def config_mismatches(labels: Mapping[str, str], config: EngineConfig) -> list[str]:
    """Knobs set in ``config`` that ``cache_config_info`` reports otherwise."""
    asked = {
        "block_size": config.block_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "enable_prefix_caching": config.enable_prefix_caching,
        "cache_dtype": config.kv_cache_dtype,
    }
    found = []
    for key, want in asked.items():
        if want is None or key not in labels:
            continue
        have = labels[key]
        if isinstance(want, bool):
            same = have.lower() == str(want).lower()
        elif isinstance(want, int | float):
            try:
                same = abs(float(have) - float(want)) < 1e-9
            except ValueError:
                same = False
        else:
            same = have == want or (want == "fp8" and have.startswith("fp8"))
        if not same:
            found.append(f"{key} is {have}, asked {want}")
    return found
