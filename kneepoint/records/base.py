"""The common base of every record that crosses a module boundary.

Records are frozen (no attribute is reassigned after validation) and strict about their
inputs (an unknown key is an error, never silently dropped), so a typo in a study file
cannot quietly turn into an engine default.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Frozen, extra-forbidding pydantic model; field names carry their units."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=True,
        # Latencies of failed requests are infinite; JSON has no infinity, so it is written as
        # the string "Infinity" (and read back as the float), never silently as null.
        ser_json_inf_nan="strings",
    )


class InputRecord(Record):
    """A record read from a person's file (study, catalogues, workloads): every number in it
    must be finite. Measurements may be infinite (a failed request's latency); a budget of
    ``.inf`` hours or a rate of ``.nan`` is a typo that would silently switch a limit off."""

    # Field docstrings become the study file schema's descriptions (kneepoint config schema):
    # read from the source for a person's records only, where every record paid 130 ms of each
    # process's start (0.79 s to import the command line)
    model_config = ConfigDict(allow_inf_nan=False, use_attribute_docstrings=True)
