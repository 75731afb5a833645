"""A fake OpenAI/vLLM server on 127.0.0.1 that misbehaves in one named way (the hostile-server
tier, tests/test_hostile_servers.py): every mode must end in counted failed requests, dropped
signals or one ``kneepoint:`` line, never a traceback or a hang."""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

PAGE = (Path(__file__).parent.parent / "fixtures" / "metrics" / "vllm-0.32.0-cpu.prom").read_text()

STREAM_MODES = ("str_chunk", "list_chunk", "garbage", "bad_choices", "no_done", "all_500",
                "reset", "hang", "trickle")  # fmt: skip
METRICS_MODES = ("nan_metrics", "huge_metrics")
MODELS_MODES = ("models_list", "models_null", "models_ints", "models_str")
CARD = {"id": "m", "object": "model", "owned_by": "vllm",
        "root": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 131072}  # fmt: skip
"""What the server says it serves, in vLLM's words: served as "m", loaded from an 8B."""

_GOOD = [{"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]},
         {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2}}]  # fmt: skip


def nan_page() -> str:
    """The captured page with its KV usage NaN, its running count +Inf and its TTFT
    histogram's count -Inf."""
    poisoned = {"vllm:kv_cache_usage_perc{": "NaN", "vllm:num_requests_running{": "+Inf",
                "vllm:time_to_first_token_seconds_count{": "-Inf"}  # fmt: skip
    lines = []
    for line in PAGE.splitlines():
        value = next((v for k, v in poisoned.items() if line.startswith(k)), None)
        lines.append(line if value is None else f"{line.rsplit(' ', 1)[0]} {value}")
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        mode = self.server.mode
        if self.path.startswith("/v1/models"):
            body = {"models_list": [], "models_null": None, "models_ints": {"data": [1, 2]},
                    "models_str": {"data": "abc"}}.get(mode, {"data": [CARD]})  # fmt: skip
            self._send(200, json.dumps(body).encode())
        elif self.path.startswith("/metrics"):
            if mode == "huge_metrics":
                self._stream(200, (b"# HELP x\n" * 100_000 for _ in range(40)))  # ~36 MB
            else:
                self._send(200, (nan_page() if mode == "nan_metrics" else PAGE).encode())
        elif self.path.startswith("/version"):
            self._send(200, b'{"version": "0.0-hostile"}')
        else:
            self._send(200, b"")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = self.server.mode
        if mode == "all_500":
            self._send(500, b"boom, not json")
        elif mode == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            self.close_connection = True
            self.connection.close()
        elif mode == "hang":
            self.server.stopping.wait(30)
        else:
            self._stream(200, self._events(mode))

    def _events(self, mode: str) -> Iterator[bytes]:
        odd: dict[str, list[object]] = {"str_chunk": ["str"], "list_chunk": [[1, 2, 3]],
                                        "bad_choices": [{"choices": ["x", 1]}]}  # fmt: skip
        chunks = odd.get(mode, _GOOD)
        if mode == "garbage":
            yield b"data: \x00\xff{{not json\n\n"
        for chunk in chunks:
            if mode == "trickle":
                time.sleep(1.0)
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        if mode not in ("no_done", "trickle"):
            yield b"data: [DONE]\n\n"
        if mode == "trickle":
            self.server.stopping.wait(30)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, status: int, parts: Iterator[bytes]) -> None:
        self.send_response(status)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for part in parts:
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client gave up on it: what the mode was for
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up on a hostile answer is what the mode is for

    def __init__(self, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.stopping = threading.Event()


class HostileServer:
    """``with HostileServer("nan_metrics") as url: ...``"""

    def __init__(self, mode: str) -> None:
        self._server = _Server(mode)
        # shutdown() waits for the loop to look again: every 0.5 s by default, which was half
        # a second of every hostile-server test
        serve = functools.partial(self._server.serve_forever, poll_interval=0.02)
        self._thread = threading.Thread(target=serve, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
