"""A stand-in for `vllm serve` that fails the ways vLLM fails, for the backend's tests.

    python fake_vllm.py MODE MODEL [vllm flags...] --port P --served-model-name NAME

MODE: oom | bad-flag | hang | slow | crash | serve. Every mode first starts a child process
(as vLLM starts its engine core) and logs its pid, so tests can check the group was stopped.
`serve` answers /health, /v1/models, /metrics and streams /v1/completions; with
`--die-after-requests N` it exits abruptly once it has streamed N whole answers (an event, not
a clock: on a slow host a timed death came before the first answer ended).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _arg(name: str, default: str = "") -> str:
    args = sys.argv
    return args[args.index(name) + 1] if name in args else default


def say(line: str) -> None:
    print(line, flush=True)


def main() -> None:
    mode = sys.argv[1]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    say(f"INFO engine core started, pid {child.pid}")
    if mode == "oom":
        say("INFO Loading weights took 0.52 seconds")
        say("ERROR Traceback (most recent call last):")
        say(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has"
            " a total capacity of 79.10 GiB of which 1.06 GiB is free."
        )
        sys.exit(1)
    if mode == "bad-flag":
        say("usage: api_server.py [-h] [--host HOST] [--port PORT] ...")
        say("api_server.py: error: unrecognized arguments: --bogus-flag 3")
        sys.exit(2)
    if mode == "hang":
        time.sleep(3600)
    if mode == "slow":
        while True:
            say("INFO still compiling ...")
            time.sleep(0.2)
    if mode == "crash":
        say("RuntimeError: Engine core initialization failed. See root cause above.")
        os._exit(3)
    serve(int(_arg("--die-after-requests", "0")))


class Handler(BaseHTTPRequestHandler):
    served = ""
    die_after_requests = 0
    answered = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, body: object, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json({})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": self.served, "object": "model"}]})
        elif self.path == "/metrics":
            text = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
            self.send_response(200)
            self.send_header("content-length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        else:
            self._json({"error": {"message": "not found"}}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        n = int(body.get("max_tokens", 1))
        for i in range(n):
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": i + 1}
            chunk = {"choices": [{"text": "x"}], "usage": usage}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(0.02)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        with Handler.lock:
            Handler.answered += 1
            if Handler.die_after_requests and Handler.answered >= Handler.die_after_requests:
                say("ERROR EngineCore encountered a fatal error.")
                os._exit(1)


def serve(die_after_requests: int) -> None:
    Handler.served = _arg("--served-model-name", sys.argv[2])
    Handler.die_after_requests = die_after_requests
    server = ThreadingHTTPServer((_arg("--host", "127.0.0.1"), int(_arg("--port"))), Handler)
    say("INFO GPU KV cache size: 1,750,000 tokens")
    say("INFO Maximum concurrency for 2,048 tokens per request: 854.49x")
    server.serve_forever()


if __name__ == "__main__":
    main()
