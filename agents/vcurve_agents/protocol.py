"""The agent side of vcurve's agent process protocol (`vcurve.agent.v1`, docs/agent-protocol.md).

An adapter reads the `start` message, asks the worker for every shell command it wants run
(`exec` / `exec_result`), reports each step's messages (`step`) and ends with `final`:

    channel = AgentChannel()              # stdin/stdout of this process, JSON lines
    start = channel.start()               # the task, the message prefix, t, budget, seed, model
    result = channel.exec("ls", 60)       # ExecResult(output, returncode, timed_out, exception)
    channel.step([assistant_message, observation_message])
    channel.final("submitted", patch, messages)

A session (a `start` with `"turns": true`) is a run of several turns: the worker sends an
`instruction`, the agent works (exec, step) and ends the turn with `turn_end` (its user-facing
report and its whole message list), and the worker answers with the next instruction or `end`,
after which the agent sends its `final`:

    start = channel.start()
    while (instruction := channel.next_instruction()) is not None:   # None: the worker sent end
        messages.append({"role": "user", "content": instruction.content})
        ...                               # exec / step, at most instruction.budget steps
        channel.turn_end(report, messages)
    channel.final("submitted", patch, messages)

The channel enforces the protocol's order on this side (one exec at a time, no step beyond the
budget, one final, nothing after it) and raises ProtocolError on anything the worker sends that
the protocol does not allow. An adapter that meets a ProtocolError should log it and exit non-zero
without a final: the worker then counts the run as having no outcome, which is what a broken run
is. Logs go to stderr (`log`); stdout carries protocol messages only.

Standard library only, so any agent's Python environment can import it.
"""

import json
import sys
from dataclasses import dataclass, field

PROTOCOL = "vcurve.agent.v1"
MAX_LINE_BYTES = 64 * 1024 * 1024
END_TYPES = ("submitted", "step_cap", "cost_limit", "context_window", "format_error", "error")


class ProtocolError(Exception):
    """The other side broke the protocol (or this side was about to)."""


def log(*parts):
    """One line on stderr, the agent's free-text log."""
    print(*parts, file=sys.stderr, flush=True)


@dataclass
class Start:
    """The `start` message: what a run (base run or continuation) begins from."""

    task: dict
    messages: list
    t: int
    budget: int
    seed: int
    model: dict
    raw: dict = field(repr=False, default_factory=dict)
    turns: bool = False  # a session: instructions follow, turns end with turn_end


@dataclass
class Instruction:
    """The worker's `instruction`: turn `turn` (1-based) of a session opens with `content`."""

    turn: int
    content: str
    budget: int  # the steps this turn may take


@dataclass
class ExecResult:
    """The worker's `exec_result` for one command."""

    output: str
    returncode: object  # int, or None when the command did not finish
    timed_out: bool
    exception: object  # str naming an infrastructure failure, or None


def _expect(cond, what):
    if not cond:
        raise ProtocolError(what)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _check_messages(messages, what):
    _expect(isinstance(messages, list), f"{what} is not a list")
    for i, m in enumerate(messages):
        _expect(isinstance(m, dict), f"{what}[{i}] is not an object")
    return messages


def parse_start(msg):
    """Validate a decoded `start` message and return it as a Start."""
    _expect(msg.get("type") == "start", f"expected a start message, got type {msg.get('type')!r}")
    _expect(msg.get("protocol") == PROTOCOL, f"protocol {msg.get('protocol')!r}, this agent speaks {PROTOCOL}")
    task = msg.get("task")
    _expect(isinstance(task, dict), "start.task is not an object")
    messages = _check_messages(msg.get("messages"), "start.messages")
    t, budget, seed = msg.get("t"), msg.get("budget"), msg.get("seed")
    _expect(_is_int(t) and t >= 0, f"start.t is not a non-negative integer: {t!r}")
    _expect(_is_int(budget) and budget >= 0, f"start.budget is not a non-negative integer: {budget!r}")
    _expect(_is_int(seed) and 0 <= seed < 2**64, f"start.seed is not an unsigned 64-bit integer: {seed!r}")
    model = msg.get("model")
    if model is None:
        model = {}
    _expect(isinstance(model, dict), "start.model is not an object")
    turns = msg.get("turns", False)
    _expect(isinstance(turns, bool), f"start.turns is not a boolean: {turns!r}")
    return Start(task=task, messages=messages, t=t, budget=budget, seed=seed, model=model, raw=msg, turns=turns)


def parse_instruction(msg):
    """Validate a decoded `instruction` or `end` message: an Instruction, or None for `end`."""
    kind = msg.get("type")
    if kind == "end":
        return None
    _expect(kind == "instruction", f"expected instruction or end, got type {kind!r}")
    turn, content, budget = msg.get("turn"), msg.get("content"), msg.get("budget")
    _expect(_is_int(turn) and turn >= 1, f"instruction.turn is not a positive integer: {turn!r}")
    _expect(isinstance(content, str), "instruction.content is not a string")
    _expect(_is_int(budget) and budget >= 0, f"instruction.budget is not a non-negative integer: {budget!r}")
    return Instruction(turn=turn, content=content, budget=budget)


def parse_exec_result(msg):
    """Validate a decoded `exec_result` message and return it as an ExecResult."""
    _expect(msg.get("type") == "exec_result", f"expected exec_result, got type {msg.get('type')!r}")
    output = msg.get("output")
    _expect(isinstance(output, str), "exec_result.output is not a string")
    rc = msg.get("returncode")
    _expect(rc is None or _is_int(rc), f"exec_result.returncode is not an integer or null: {rc!r}")
    timed_out = msg.get("timed_out", False)
    _expect(isinstance(timed_out, bool), "exec_result.timed_out is not a boolean")
    exc = msg.get("exception")
    _expect(exc is None or isinstance(exc, str), "exec_result.exception is not a string or null")
    return ExecResult(output=output, returncode=rc, timed_out=timed_out, exception=exc)


class JsonLines:
    """JSON objects, one per line, over a pair of binary streams."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer

    def read(self):
        """The next object, or None at the end of the stream."""
        line = self.reader.readline(MAX_LINE_BYTES + 1)
        if not line:
            return None
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError(f"a line longer than {MAX_LINE_BYTES} bytes")
        try:
            msg = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError(f"a line that is not JSON: {e}") from None
        if not isinstance(msg, dict):
            raise ProtocolError("a line that is not a JSON object")
        return msg

    def write(self, msg):
        data = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        self.writer.write(data)
        self.writer.flush()


class AgentChannel:
    """This process's end of the protocol: stdin from the worker, stdout to it."""

    def __init__(self, reader=None, writer=None):
        self.lines = JsonLines(reader or sys.stdin.buffer, writer or sys.stdout.buffer)
        self.started = None
        self.steps = 0
        self.finished = False
        self.budget = 0
        self.turn = None  # the open turn's Instruction in a session, None between turns
        self.ended = False  # the worker sent end

    def _recv(self):
        msg = self.lines.read()
        if msg is None:
            raise ProtocolError("the worker closed stdin before the run ended")
        return msg

    def start(self):
        """Read and return the `start` message (once, first)."""
        _expect(self.started is None, "start read twice")
        self.started = parse_start(self._recv())
        self.budget = self.started.budget
        return self.started

    def next_instruction(self):
        """In a session: read the next turn's Instruction, or None when the worker sent `end` (then
        only exec and final may follow). The turn's step budget starts afresh."""
        self._check_running()
        _expect(self.started.turns, "next_instruction in a run that is not a session")
        _expect(self.turn is None, "next_instruction before the open turn's turn_end")
        _expect(not self.ended, "next_instruction after the worker ended the session")
        instruction = parse_instruction(self._recv())
        if instruction is None:
            self.ended = True
        else:
            self.turn, self.steps, self.budget = instruction, 0, instruction.budget
        return instruction

    def turn_end(self, report, messages):
        """End the open turn with its user-facing report; `messages` is the whole message list."""
        self._check_running()
        _expect(self.turn is not None, "turn_end without an open turn")
        _expect(isinstance(report, str) and report.strip(), "the report is empty")
        _check_messages(messages, "turn_end messages")
        self.lines.write({"type": "turn_end", "report": report, "messages": messages})
        self.turn = None

    def exec(self, command, timeout_s):
        """Ask the worker to run `command` and wait for its result."""
        self._check_running()
        _expect(isinstance(command, str), "exec command is not a string")
        _expect(isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and timeout_s > 0,
                f"exec timeout_s is not a positive number: {timeout_s!r}")
        self.lines.write({"type": "exec", "command": command, "timeout_s": timeout_s})
        return parse_exec_result(self._recv())

    def step(self, messages):
        """Report one step: the messages it appended (the model's reply, then the observations)."""
        self._check_running()
        _check_messages(messages, "step messages")
        _expect(not self.ended, "a step after the worker ended the session")
        _expect(not self.started.turns or self.turn is not None, "a step outside a turn")
        _expect(self.steps < self.budget, f"a step beyond the budget of {self.budget}")
        self.lines.write({"type": "step", "messages": messages})
        self.steps += 1

    def final(self, end_type, submission, messages):
        """End the run. `messages` is the whole message list, prefix included."""
        self._check_running()
        _expect(end_type in END_TYPES, f"unknown end_type {end_type!r}")
        _expect(submission is None or isinstance(submission, str), "submission is not a string or null")
        _check_messages(messages, "final messages")
        self.lines.write({"type": "final", "end_type": end_type, "submission": submission, "messages": messages})
        self.finished = True

    @property
    def steps_left(self):
        return self.budget - self.steps

    def _check_running(self):
        _expect(self.started is not None, "message sent before start")
        _expect(not self.finished, "message sent after final")
