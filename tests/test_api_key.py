"""API keys from the environment: a study names the variable, never the value; a launched
server gets the key in its environment (never its argv) and every client kneepoint points at
it sends ``Authorization: Bearer``; ``kneepoint sim serve`` guards /v1 as vLLM does."""

from __future__ import annotations

import asyncio
import json
from argparse import Namespace
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml

from kneepoint.cli.diagnose import _study
from kneepoint.cli.main import main
from kneepoint.config import ConfigError, load_study
from kneepoint.load.plan import PlannedRequest
from kneepoint.probes.backends import LaunchBackend, RunningServer, sim_argv
from kneepoint.probes.backends.measure import Instruments, measure
from kneepoint.probes.backends.vllm import vllm_server
from kneepoint.probes.client.loadgen import LoadOptions, run_load
from kneepoint.probes.client.quality import QualityCheckError, greedy_outputs
from kneepoint.probes.runtime.clock import Clock
from kneepoint.probes.server.credentials import server_env
from kneepoint.probes.server.server_failure import ServerFailedError
from kneepoint.probes.telemetry.samplers import HttpSampler
from kneepoint.records.backend_spec import AttachBackend as AttachSpec
from kneepoint.records.study import StudySpec
from kneepoint.run.folder import RunFolder
from tests.support.openings import CONFIG, opening

from .conftest import QUICKSTART

KEY = "kp-key-3c9b1e7a52"
PLAN = [PlannedRequest(i, i * 0.05, "c", (5, 6, 7), 4) for i in range(6)]


def test_the_key_travels_to_the_server_and_back_on_every_route(tmp_path: Path) -> None:
    backend = LaunchBackend(sim_argv("h100", "llama-3.2-1b"), env={"VLLM_API_KEY": KEY},
                            api_key=KEY, sim_telemetry=True)  # fmt: skip
    with backend.serve(CONFIG, tmp_path) as endpoint:
        assert endpoint.api_key == KEY and KEY not in repr(endpoint)
        assert endpoint.process is not None and KEY not in " ".join(endpoint.process.argv)
        url, served = endpoint.url, endpoint.served_model
        with httpx.Client(base_url=url) as bare:  # vLLM's rule: /v1 guarded, probes open
            assert bare.get("/v1/models").status_code == 401
            assert bare.post("/v1/completions", json={}).json() == {"error": "Unauthorized"}
            assert bare.get("/health").status_code == 200
            assert bare.get("/metrics").status_code == 200
            wrong = bare.get("/v1/models", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
        keyed = LoadOptions(served, api_key=KEY)
        assert KEY not in repr(keyed)
        assert all(r.ok for r in asyncio.run(run_load(url, PLAN, keyed)))  # lean HTTP/1.1
        via_httpx = asyncio.run(run_load(url, PLAN, keyed, transport=httpx.AsyncHTTPTransport()))
        assert all(r.ok for r in via_httpx)
        refused = asyncio.run(run_load(url, PLAN, LoadOptions(served)))
        assert all(r.error and r.error.startswith("HTTP 401") for r in refused)
        measured = measure(url, PLAN, 20.0, keyed, None,
                           instruments=Instruments(sim_telemetry=True))  # fmt: skip
        assert measured.scrapes and all(r.ok for r in measured.records)
        sampler = HttpSampler(url, Clock.start(), sim_telemetry=True, api_key=KEY)
        asyncio.run(_sample_once(sampler))
        assert sampler.gpu and sampler.errors == 0, "/telemetry answered the key"
        with pytest.raises(QualityCheckError, match="no tokens in logprobs"):  # got through
            greedy_outputs(url, served, ["hi"], 2, api_key=KEY)
        with pytest.raises(QualityCheckError, match="401"):
            greedy_outputs(url, served, ["hi"], 2)
        with RunningServer(url, api_key=KEY).serve(CONFIG, tmp_path) as attached:
            assert attached.served_model == served and attached.api_key == KEY
        locked_out = pytest.raises(ServerFailedError, match=r"HTTP 401.*wants an API key")
        with locked_out, RunningServer(url).serve(CONFIG, tmp_path):
            pass
        wrong_key = pytest.raises(ServerFailedError, match=r"does not take the key it was given")
        with wrong_key, RunningServer(url, api_key="not-" + KEY).serve(CONFIG, tmp_path):
            pass
    assert KEY not in (tmp_path / "server.log").read_text()


async def _sample_once(sampler: HttpSampler) -> None:
    stop = asyncio.Event()
    stop.set()  # one round, then out
    await sampler.run(stop)


def test_a_key_in_the_agents_environment_does_not_lock_out_a_keyless_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "stray-key-from-the-shell")
    backend = LaunchBackend(sim_argv("h100", "llama-3.2-1b"))
    with backend.serve(CONFIG, tmp_path) as endpoint:
        records = asyncio.run(run_load(endpoint.url, PLAN, LoadOptions(endpoint.served_model)))
    assert all(r.ok for r in records)


def _vllm_study(**backend: object) -> StudySpec:
    spec = {"kind": "vllm", **backend}
    return load_study(QUICKSTART, [f"backend={yaml.safe_dump(spec, default_flow_style=True)}"])


def test_a_launched_vllm_gets_its_secrets_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KP_TEST_KEY", KEY)
    monkeypatch.setenv("KP_TEST_HF", "hf_secretsecretsecretsecret")
    env = {"HF_TOKEN": "${KP_TEST_HF}", "VLLM_LOGGING_LEVEL": "INFO"}
    study = _vllm_study(api_key_env="KP_TEST_KEY", env=env)
    launcher = vllm_server(opening(study, tmp_path))
    assert isinstance(launcher, LaunchBackend) and launcher.api_key == KEY
    assert launcher.env == {"HF_TOKEN": "hf_secretsecretsecretsecret", "VLLM_API_KEY": KEY,
                            "VLLM_LOGGING_LEVEL": "INFO"}  # fmt: skip
    argv = launcher.argv_for(CONFIG, launcher.host, 8000, "served")
    assert KEY not in argv and "--api-key" not in argv


def test_a_missing_variable_is_one_line_naming_the_field_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KP_UNSET_KEY", raising=False)
    monkeypatch.delenv("KP_UNSET_HF", raising=False)
    runs = tmp_path / "runs"
    code = main(["tune", str(QUICKSTART), "--runs-dir", str(runs),
                 "--set", "backend={kind: vllm, api_key_env: KP_UNSET_KEY}"])  # fmt: skip
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "backend.api_key_env" in line and "KP_UNSET_KEY is not set" in line
    assert not runs.exists() or not any(runs.iterdir()), "refused before anything started"
    # a resumed run (or a sweep) reads its variables when it opens a server: still before one
    study = _vllm_study(env={"HF_TOKEN": "${KP_UNSET_HF}"})
    with pytest.raises(ConfigError, match=r"backend\.env\.HF_TOKEN: KP_UNSET_HF is not set"):
        server_env(study, study.backend, None)  # type: ignore[arg-type]
    keyed = _vllm_study(api_key_env="KP_UNSET_KEY")
    with pytest.raises(ConfigError, match=r"backend\.api_key_env: KP_UNSET_KEY is not set"):
        vllm_server(opening(keyed, tmp_path))


@pytest.mark.parametrize(
    ("backend", "words"),
    [
        ({"env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuv"}}, "write ${HF_TOKEN}"),
        ({"env": {"MY_DB_PASSWORD": "hunter22"}}, "write ${MY_DB_PASSWORD}"),
        ({"env": {"VLLM_API_KEY": "${X}"}}, "backend.api_key_env"),
        ({"command": ["vllm", "serve", "--api-key", "abc"]}, "seen in `ps`"),
        ({"command": ["vllm", "serve", "--api-key=abc"]}, "seen in `ps`"),
        ({"api_key_env": "not a name"}, "api_key_env"),
    ],
)
def test_a_study_refuses_secret_values(backend: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        _vllm_study(**backend)
    # the problem (after the --set that gave it, which the user typed) repeats no value
    problem = str(info.value).rsplit(": backend.", 1)[-1]
    assert words in problem
    for value in ("hf_abcdefghijklmnopqrstuv", "hunter22"):
        assert value not in problem


def test_the_run_folder_keeps_variable_names_and_resumes_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KP_TEST_KEY", KEY)
    study = _vllm_study(api_key_env="KP_TEST_KEY", env={"HF_TOKEN": "${KP_TEST_HF}"})
    folder = RunFolder.create(tmp_path, study, datetime.now().astimezone())
    folder.write_best(study, CONFIG)
    kept = (folder.path / "study.yaml").read_text()
    assert "api_key_env: KP_TEST_KEY" in kept and "${KP_TEST_HF}" in kept and KEY not in kept
    assert KEY not in (folder.path / "best-command.txt").read_text()
    resumed = RunFolder.existing(folder.path).study()
    assert resumed.backend == study.backend


def test_sim_serve_takes_the_key_on_its_command_line_too(tmp_path: Path) -> None:
    argv = sim_argv("h100", "llama-3.2-1b")
    flagged = LaunchBackend(lambda c, h, p, s: [*argv(c, h, p, s), "--api-key", KEY],
                            api_key=KEY)  # fmt: skip
    with flagged.serve(CONFIG, tmp_path) as endpoint, httpx.Client(base_url=endpoint.url) as bare:
        assert bare.get("/v1/models").status_code == 401
        keyed = bare.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert keyed.json()["data"][0]["id"] == endpoint.served_model


def test_diagnose_of_a_running_server_takes_its_key_from_a_variable() -> None:
    args = Namespace(overrides=[], url="http://127.0.0.1:8000", api_key_env="KP_TEST_KEY",
                     study=None, gpu="h100-sxm", model="llama-3.1-8b", workload="chat")  # fmt: skip
    backend = _study(args).backend
    assert isinstance(backend, AttachSpec) and backend.api_key_env == "KP_TEST_KEY"
    with pytest.raises(ConfigError, match="goes with --url"):
        _study(Namespace(**{**vars(args), "url": None}))


SECRET_ARGS = [
    ["--api-key", "sk-hunter22"], ["--api-key=sk-hunter22"],
    ["--hf-token", "hf_hunter22abcdefghijklm"], ["--hf-token=hunter22-own-token"],
    # vLLM's parser reads _ as - and takes abbreviations; the refusal line quoted these whole
    # (2026-12-03), and a flag only named like a secret was passed through to every file.
    ["--hf_token", "hunter22und"], ["--api_key", "hunter22c1"], ["--hf_token=hunter22c2"],
    ["--api-ke=hunter22abbr"], ["--ssl-keyfile-password", "hunter22pw"],
    ["--load-format", "dummy", "--hf-token", "hunter22-late"],
]  # fmt: skip


@pytest.mark.parametrize("extra", SECRET_ARGS)
def test_a_secret_flag_in_extra_args_is_refused_without_repeating_it(extra: list[str]) -> None:
    """It was accepted, and the key landed in nine run-folder files and on stdout (issue "Step
    13"): the redaction missed the JSON-array form. An HF token was accepted and landed in
    best-command.txt, best.yaml, study.yaml and every sweep; the refusal of a key repeated it
    in the --set the line quoted (issue "Step 17")."""
    args = yaml.safe_dump(extra, default_flow_style=True).strip()
    with pytest.raises(ConfigError) as info:
        load_study(QUICKSTART, [f"engine.extra_args={args}"])
    line = str(info.value)
    assert "seen in `ps`" in line
    assert "backend.api_key_env" in line or "${HF_TOKEN}" in line or "outside the study" in line
    assert "hunter22" not in line


def test_a_token_shaped_argument_is_refused_and_not_repeated() -> None:
    """A Hugging Face token after a flag kneepoint does not know was redacted in the ledger
    but kept whole in the run folder's study.yaml (2026-12-03)."""
    token = "hf_" + "hunter22" * 4 + "ab"
    with pytest.raises(ConfigError) as info:
        load_study(QUICKSTART, [f'engine.extra_args=["--foo", "{token}"]'])
    assert "looks like a token" in str(info.value) and "hunter22" not in str(info.value)


def test_a_secret_field_named_in_a_message_is_not_garbled() -> None:
    """``backend.api_key: unknown key`` read as an argument dump and lost its words."""
    with pytest.raises(ConfigError) as info:
        load_study(QUICKSTART, ["backend.api_key=hunter22a6"])
    line = str(info.value)
    assert "hunter22" not in line and "unknown key" in line, line


@pytest.mark.parametrize("extra", SECRET_ARGS)
def test_a_planted_secret_reaches_no_file_and_no_output(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both ways a study can carry one (a --set, the study file) end in one line, exit 2,
    and an empty runs folder."""
    args = json.dumps(extra)
    study = tmp_path / "study.yaml"
    text = yaml.safe_load(QUICKSTART.read_text())
    text["engine"]["extra_args"] = extra
    study.write_text(yaml.safe_dump(text))
    runs = tmp_path / "runs"
    for argv in (["tune", str(QUICKSTART), "--set", f"engine.extra_args={args}"],
                 ["tune", str(study)]):  # fmt: skip
        assert main([*argv, "--runs-dir", str(runs)]) == 2
        out, err = capsys.readouterr()
        assert "hunter22" not in out + err and len(err.strip().splitlines()) == 1
        assert "seen in `ps`" in err
        assert not runs.exists() or not any(runs.iterdir())
