"""The KubeRay manifest and the image it runs (deploy/): what a cluster needs to run a tune
agrees with the program and with itself."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from kneepoint.cli.main import build_parser

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "deploy" / "kuberay" / "rayjob.yaml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"


def _job() -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(JOB.read_text())
    return job


def _containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = template["spec"]["containers"]
    return containers


def test_the_job_runs_a_tune_the_command_line_parses() -> None:
    job = _job()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["kneepoint", "tune"]
    args = build_parser().parse_args(argv[1:])
    assert args.target == Path("/study/study.yaml")


def test_each_worker_asks_kubernetes_for_the_gpus_it_gives_ray() -> None:
    cluster = _job()["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    for group in cluster["workerGroupSpecs"]:
        (container,) = _containers(group["template"])
        limits = container["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == group["rayStartParams"]["num-gpus"]


def test_the_study_and_the_run_folder_are_mounted_where_the_job_reads_them() -> None:
    cluster = _job()["spec"]["rayClusterSpec"]
    (head,) = _containers(cluster["headGroupSpec"]["template"])
    mounts = {m["mountPath"] for m in head["volumeMounts"]}
    argv = shlex.split(_job()["spec"]["entrypoint"])
    assert str(Path(argv[2]).parent) in mounts and argv[argv.index("--runs-dir") + 1] in mounts


def test_the_image_installs_kneepoint_with_ray_and_is_the_one_the_nodes_run() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"pip install .*'\.\[ray\]'", text)
    tag = re.search(r"docker build -f deploy/Dockerfile -t (\S+) \.", text)
    assert tag is not None
    cluster = _job()["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]]
    templates += [g["template"] for g in cluster["workerGroupSpecs"]]
    assert {c["image"] for t in templates for c in _containers(t)} == {tag[1]}
