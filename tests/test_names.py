"""Names people use: a study's ``model`` takes the Hugging Face id kneepoint prints in its own
`vllm serve` line (or one in the local hub cache), ``gpu`` the prefixes `sim serve --gpu`
takes where they are unambiguous, and `kneepoint config list` prints each catalogue."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kneepoint.config import ConfigError, load_study
from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.sim.serve_args import _pick

from .conftest import QUICKSTART


def test_a_hugging_face_id_and_a_gpu_prefix_name_catalogue_entries() -> None:
    study = load_study(QUICKSTART, ["model=meta-llama/Llama-3.1-8B-Instruct", "gpu=h100"])
    assert (study.model.name, study.gpu.name) == ("llama-3.1-8b", "h100-sxm")
    assert load_study(QUICKSTART, ["gpu=H200-SXM"]).gpu.name == "h200-sxm"
    b200 = load_study(QUICKSTART, ["gpu=B200"]).gpu
    assert (b200.name, b200.architecture, b200.has_fp8) == ("b200", "blackwell", True)


def test_an_ambiguous_or_unknown_name_is_refused_with_the_list_to_choose_from() -> None:
    with pytest.raises(ConfigError, match=r"ambiguous GPU 'h' \(catalogue: h100-sxm, h200-sxm\)"):
        load_study(QUICKSTART, ["gpu=h"])
    with pytest.raises(ConfigError, match=r"catalogue model \(llama-3.1-8b, llama-3.1-70b, "):
        load_study(QUICKSTART, ["model=llama"])


def _snapshot(hub: Path, commit: str, layers: int) -> Path:
    """A cached snapshot of acme/tiny with ``layers`` layers (``commit``: its folder)."""
    snapshot = hub / "models--acme--tiny" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 4096, "max_position_embeddings": 16384,
    }))  # fmt: skip
    return snapshot


def test_a_hugging_face_id_is_read_from_the_local_hub_cache_at_refs_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revision `vllm serve` loads (refs/main), not the newest snapshot on disk."""
    hub = tmp_path / "hub"
    _snapshot(hub, "abc123", layers=4)
    newer = _snapshot(hub, "def456", layers=8)
    os.utime(newer / "config.json", (2e9, 2e9))  # the newest by mtime, not refs/main
    (hub / "models--acme--tiny" / "refs").mkdir()
    (hub / "models--acme--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    study = load_study(QUICKSTART, ["model=acme/tiny", "engine.model=acme/tiny"])
    assert (study.model.num_layers, study.model.hidden_size) == (4, 256)
    # Named by its id, not by the snapshot's hash (it served as `vllm serve abc123`).
    served = load_study(QUICKSTART, ["model=acme/tiny"])
    assert (served.model.name, served.model.hf_id, served.engine.model) == (
        "tiny",
        "acme/tiny",
        "acme/tiny",
    )


@pytest.mark.parametrize(
    ("ref", "key"),
    [("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
     ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
     ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
     ("google/gemma-3-12b-pt", "gemma-3-12b")],
)  # fmt: skip
def test_a_checkpoint_of_a_catalogue_models_family_takes_its_shapes(ref: str, key: str) -> None:
    """Refused where `Llama-3.1-8B` alone was taken as a prefix (2026-12-03); served as the
    user named it."""
    study = load_study(QUICKSTART, [f"model={ref}"])
    assert (study.model.name, study.model.hf_id, study.engine.model) == (key, ref, ref)


def test_sim_serve_reads_names_as_a_study_does() -> None:
    model = _pick(model_catalogue(), "meta-llama/Llama-3.1-8B", "model")
    assert (model.name, model.hf_id) == ("llama-3.1-8b", "meta-llama/Llama-3.1-8B")
    # One wording for one refusal (sim serve said "no gpu 'h100-pcie' (known: ...)").
    with pytest.raises(ConfigError, match=r"unknown GPU 'h100-pcie' \(catalogue: "):
        _pick(gpu_catalogue(), "h100-pcie", "gpu")
    with pytest.raises(ConfigError, match=r"unknown GPU 'h100-pcie' \(catalogue: "):
        load_study(QUICKSTART, ["gpu=h100-pcie"])
