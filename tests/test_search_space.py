"""The space helpers the proposers share: configurations are built canonically or not at
all (the domains' own answers are tested in test_knob_domains)."""

from __future__ import annotations

from kneepoint.policies.search.space import build_config, changes_from_incumbent
from kneepoint.records.engine import EngineConfig
from tests.support.synthetic_space import make_space


def test_a_value_equal_to_the_incumbents_keeps_the_incumbents_own_setting() -> None:
    space = make_space()
    same = build_config(space.incumbent, {"max_num_seqs": 256}, space)
    assert same is not None and same.fingerprint() == space.incumbent.fingerprint()
    moved = build_config(space.incumbent, {"max_num_seqs": 512}, space)
    assert moved is not None and changes_from_incumbent(moved, space) == {"max_num_seqs": 512}


def test_a_change_set_engine_config_rejects_builds_nothing() -> None:
    space = make_space(EngineConfig(model="synthetic/model", max_num_batched_tokens=512))
    assert build_config(space.incumbent, {"max_num_seqs": 1024}, space) is None
    assert build_config(space.incumbent, {"gpu_memory_utilization": 1.5}, space) is None
