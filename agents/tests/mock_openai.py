"""A mock OpenAI-compatible chat-completions server for the mini-swe-agent adapter's tests.

Test code, not product. `MockOpenAI()` serves `POST …/chat/completions` on 127.0.0.1 (a free
port, stdlib http.server in a thread), records every request body it receives (`requests`, the
decoded JSON objects in arrival order) and answers each with one assistant message from a scripted
stochastic policy (`Policy`) keyed by the request's `seed` and `messages`:

    with MockOpenAI() as server:
        server.base_url        # "http://127.0.0.1:PORT/v1"
        ...
        server.requests        # [request body, …]

The policy plays the test task calc-1 (deploy/images/task-calc) as mini-swe-agent's SWE-bench
configuration asks, with bash tool calls. The model call being answered is call `k` (0-based): the
number of model calls already in the request's messages (assistant messages, plus mini-swe-agent's
format-error messages, which stand for a reply that had no tool call). Its draws come from
`random.Random(f"{seed}/{k}")`, so the same seed and messages always get the same reply and a
continuation with another seed draws afresh:

    k < explore                 exploration reads (one tool call, or two in parallel with
                                probability 0.3), drawn from EXPLORE
    k == explore                the fix: the correct one with probability p_correct, else the
                                flawed one (vcurve_agents.scripted's edits of calc/parse.py)
    k == explore + 1            `git diff -- calc/parse.py > patch.txt`
    k >= explore + 2            `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt`

A call listed in `format_errors` (0-based call indices) is answered with text and no tool call
instead, which mini-swe-agent counts as a format error; `commands` maps call indices to the commands
to send instead of the plan's; a call at or after `context_window_at` is answered with HTTP 400 and
OpenAI's `context_length_exceeded` error. The reply's text carries `call k seed S`
so a test can tell which request produced which message.

As a program (for the Rust end-to-end tests, which run it as a process beside vcurve):

    PYTHONPATH=agents python3 agents/tests/mock_openai.py --port-file PORT_FILE \
        --requests REQUESTS.jsonl [--explore 3] [--p-correct 0.7]

serves until it is killed, writes its port to PORT_FILE once it listens (written whole, then
renamed, so a reader never sees half of it), and appends every request body to REQUESTS.jsonl as
one JSON line, flushed before the reply is sent.
"""

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vcurve_agents import scripted

EXPLORE = [
    "cat README.md",
    "ls calc",
    "cat calc/parse.py",
    "cat calc/evaluate.py",
    "python3 -m unittest discover -s tests",
    "grep -n 'def ' calc/*.py",
]
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"
MAKE_PATCH = "git diff -- calc/parse.py > patch.txt"


def model_calls(messages):
    """The model calls already in a request's messages: the assistant replies, and the format
    errors, which in tool-call mode are the `user` messages after the task message (observations
    are `tool` messages)."""
    assistant = sum(1 for m in messages if m.get("role") == "assistant")
    user = sum(1 for m in messages if m.get("role") == "user")
    return assistant + max(0, user - 1)


class Policy:
    """The scripted stochastic policy: see the module's docstring."""

    def __init__(self, explore=3, p_correct=0.7, format_errors=(), commands=None, context_window_at=None):
        self.explore = explore
        self.p_correct = p_correct
        self.format_errors = set(format_errors)
        self.commands = dict(commands or {})
        self.context_window_at = context_window_at

    def context_window_exceeded(self, messages):
        return self.context_window_at is not None and model_calls(messages) >= self.context_window_at

    def fix_of(self, seed):
        """The fix a run with this seed writes (drawn at the fix call)."""
        rng = random.Random(f"{seed}/{self.explore}")
        return "correct" if rng.random() < self.p_correct else "flawed"

    def reply(self, seed, messages):
        """(content, [command, …]) for the next model call; no commands is a format error."""
        k = model_calls(messages)
        rng = random.Random(f"{seed}/{k}")
        tag = f"call {k} seed {seed}"
        if k in self.format_errors:
            return f"THOUGHT: I forgot to call a tool ({tag}).", []
        if k in self.commands:
            return f"THOUGHT: As scripted ({tag}).", list(self.commands[k])
        if k < self.explore:
            commands = [rng.choice(EXPLORE)]
            if rng.random() < 0.3:
                commands.append(rng.choice(EXPLORE))
            return f"THOUGHT: Let me look around ({tag}).", commands
        if k == self.explore:
            fix = self.fix_of(seed)
            thought, command = scripted.FIXES[fix]
            return f"THOUGHT: {thought} ({tag}, {fix})", [command]
        if k == self.explore + 1:
            return f"THOUGHT: Let me write the patch ({tag}).", [MAKE_PATCH]
        return f"THOUGHT: Submitting ({tag}).", [SUBMIT]


class MockOpenAI:
    """The server: start on construction (or `with`), `close()` to stop. `log`, when given, is a
    text file every request body is appended to as a JSON line."""

    def __init__(self, policy=None, model="mock-model", log=None):
        self.policy = policy or Policy()
        self.model = model
        self.requests = []
        self.log = log
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw.decode("utf-8"))
                except ValueError:
                    return self._send(400, {"error": {"message": "the body is not JSON"}})
                with server._lock:
                    server.requests.append(body)
                    index = len(server.requests)
                    if server.log is not None:
                        server.log.write(json.dumps(body) + "\n")
                        server.log.flush()
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no such endpoint {self.path}"}})
                if server.policy.context_window_exceeded(body.get("messages") or []):
                    return self._send(400, {"error": {
                        "message": "This model's maximum context length is 32768 tokens. However, your "
                                   "messages resulted in 40000 tokens. Please reduce the length of the messages.",
                        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
                return self._send(200, server.completion(body, index))

            def _send(self, status, obj):
                data = json.dumps(obj).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def completion(self, body, index):
        messages = body.get("messages") or []
        content, commands = self.policy.reply(body.get("seed"), messages)
        message = {"role": "assistant", "content": content}
        if commands:
            message["tool_calls"] = [
                {"id": f"call_{index}_{i}", "type": "function",
                 "function": {"name": "bash", "arguments": json.dumps({"command": c})}}
                for i, c in enumerate(commands)
            ]
        prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4
        completion = len(content) // 4 + 10 * len(commands)
        return {
            "id": f"chatcmpl-mock-{index}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if commands else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        }

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main(argv=None):
    import argparse
    import os
    import signal

    parser = argparse.ArgumentParser(description="a mock OpenAI-compatible chat server (test code)")
    parser.add_argument("--port-file", required=True, help="where to write the port once listening")
    parser.add_argument("--requests", required=True, help="JSONL file every request body is appended to")
    parser.add_argument("--explore", type=int, default=3, help="exploration calls before the fix")
    parser.add_argument("--p-correct", type=float, default=0.7, help="probability of the correct fix")
    args = parser.parse_args(argv)
    with open(args.requests, "a", encoding="utf-8") as log:
        server = MockOpenAI(Policy(explore=args.explore, p_correct=args.p_correct), log=log)
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(str(server.port))
        os.replace(tmp, args.port_file)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        server.close()


if __name__ == "__main__":
    main()
