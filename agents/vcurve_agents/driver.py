"""A stand-in for vcurve's worker: runs one agent process over the agent process protocol.

It starts the agent, sends `start`, runs every `exec` with `bash -c` in a local folder
(LocalExecutor) or in a running container through `docker exec` (DockerExecutor), and records the
steps and the final message, checking the protocol's rules on the agent's side as the worker does
(order, budget, final messages = prefix ++ own ++ steps ++ trailing, nothing after final, exit
status 0). It is for tests and for trying an agent by hand, not a replacement for the worker: it has
no replay, no fingerprints and no evaluation.

By hand, against the task image (see deploy/images/README.md):

    docker run -d --name calc --network none "$TASK_IMAGE" sleep infinity
    deploy/images/build --print-task > /tmp/task.json
    PYTHONPATH=agents python3 -m vcurve_agents.driver --container calc --task /tmp/task.json \\
        --seed 7 > /tmp/run.json

`--session` (or `--instruction TEXT`, repeated) runs a session instead: the study's four
instructions (or the ones given) open its turns; the run JSON then has "turns".

`--resume RUN --t K` hands the agent the prefix h_K of a run this driver recorded. The driver does
not replay: the folder or container must already be in the state h_K (for the scripted agent, a
fresh copy of the task is h_K for every K before its fix step).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

from .protocol import PROTOCOL, JsonLines, ProtocolError

AGENTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTED = [sys.executable, "-m", "vcurve_agents.scripted"]
# The task-state study's four instructions (CTXGAP, Tables 6 and 7).
SESSION_INSTRUCTIONS = ("Investigate; do not modify code", "Implement a fix", "Run tests and report the result",
                        "Assess remaining risk")


def _decode(data):
    return data.decode("utf-8", errors="replace")


class LocalExecutor:
    """Runs commands with `bash -c` in a folder on this machine, killing the process group on timeout."""

    def __init__(self, workdir, env=None):
        self.workdir = workdir
        self.env = env

    def run(self, command, timeout_s):
        proc = subprocess.Popen(["bash", "-c", command], cwd=self.workdir, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            return {"output": _decode(out), "returncode": proc.returncode, "timed_out": False, "exception": None}
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return {"output": _decode(out), "returncode": None, "timed_out": True, "exception": None}


class DockerExecutor:
    """Runs commands with `bash -c` in a running container (`docker exec -w WORKDIR`).

    The timeout is applied inside the container with coreutils' `timeout`, which kills the command
    (not its whole process group, unlike the worker).
    """

    def __init__(self, container, workdir, env=None):
        self.container = container
        self.workdir = workdir
        self.env = dict(env or {})

    def run(self, command, timeout_s):
        argv = ["docker", "exec", "-w", self.workdir]
        for k, v in sorted(self.env.items()):
            argv += ["-e", f"{k}={v}"]
        argv += [self.container, "timeout", "-s", "KILL", str(timeout_s), "bash", "-c", command]
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.returncode == 137:  # killed by timeout's SIGKILL (or by the kernel)
            return {"output": _decode(proc.stdout), "returncode": None, "timed_out": True, "exception": None}
        return {"output": _decode(proc.stdout), "returncode": proc.returncode, "timed_out": False, "exception": None}


def make_start(task, messages=(), t=None, budget=30, seed=0, model=None):
    """A `start` message. `t` defaults to the number of assistant messages in `messages`."""
    messages = list(messages)
    if t is None:
        t = sum(1 for m in messages if m.get("role") == "assistant")
    return {"type": "start", "protocol": PROTOCOL,
            "task": {k: task[k] for k in ("id", "workdir", "problem_statement") if k in task},
            "messages": messages, "t": t, "budget": budget, "seed": seed, "model": dict(model or {})}


def drive(start, executor, argv=None, env=None, instructions=None):
    """Run one agent process from `start`; return {"start", "steps", "final", "transcript", "stderr"}.

    Each step is {"messages", "actions"} with the actions as vcurve records them; the transcript is
    the types of the messages in the order they passed ("start", "exec", "exec_result", …). Raises
    ProtocolError when the agent breaks the protocol.

    With `instructions` (a list of strings) the run is a session: `start` gets `"turns": true`,
    instruction k opens turn k with `start["budget"]` steps, and the result also has "turns":
    [{"instruction", "report", "messages", "steps"}] (steps: the turn's indices into "steps").
    """
    session = instructions is not None
    if session:
        start = dict(start, turns=True)
        if not instructions:
            raise ValueError("a session needs at least one instruction")
    argv = list(argv or SCRIPTED)
    if env is None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (AGENTS_DIR, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                                start_new_session=True)
        steps, actions, final, transcript = [], [], None, ["start"]
        turns, turn_first, ended = [], 0, False
        try:
            lines = JsonLines(proc.stdout, proc.stdin)
            lines.write(start)
            if session:
                lines.write({"type": "instruction", "turn": 1, "content": instructions[0], "budget": start["budget"]})
                transcript.append("instruction")
            while final is None:
                msg = lines.read()
                if msg is None:
                    raise ProtocolError("the agent exited (or closed stdout) before its final message")
                kind = msg.get("type")
                transcript.append(kind)
                if kind == "exec":
                    command, timeout_s = msg.get("command"), msg.get("timeout_s")
                    if not isinstance(command, str) or isinstance(timeout_s, bool) \
                            or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
                        raise ProtocolError(f"a malformed exec: {msg!r}")
                    result = executor.run(command, min(timeout_s, 3600))
                    actions.append({"command": command, "timeout_s": timeout_s, **result})
                    lines.write({"type": "exec_result", **result})
                    transcript.append("exec_result")
                elif kind == "turn_end":
                    if not session or ended:
                        raise ProtocolError("a turn_end outside a session's turn")
                    report = msg.get("report")
                    if not isinstance(report, str) or not report.strip() or not isinstance(msg.get("messages"), list):
                        raise ProtocolError(f"a malformed turn_end: {msg!r}")
                    turns.append({"instruction": instructions[len(turns)], "report": report,
                                  "messages": msg["messages"], "steps": list(range(turn_first, len(steps)))})
                    turn_first = len(steps)
                    if len(turns) < len(instructions):
                        lines.write({"type": "instruction", "turn": len(turns) + 1,
                                     "content": instructions[len(turns)], "budget": start["budget"]})
                        transcript.append("instruction")
                    else:
                        ended = True
                        lines.write({"type": "end"})
                        transcript.append("end")
                elif kind == "step":
                    if ended:
                        raise ProtocolError("a step after the session's end")
                    if len(steps) - turn_first >= start["budget"]:
                        raise ProtocolError(f"a step beyond the budget of {start['budget']}")
                    if not isinstance(msg.get("messages"), list):
                        raise ProtocolError("a step without a messages list")
                    steps.append({"messages": msg["messages"], "actions": actions})
                    actions = []
                elif kind == "final":
                    final = msg
                else:
                    raise ProtocolError(f"an unknown or unexpected message type {kind!r}")
            # Commands after the last step belong to no step (the protocol's trailing actions).
            trailing_execs = actions
            if not session:
                _check_final(start, steps, final)
            proc.stdin.close()
            rc = proc.wait(timeout=30)
            if rc != 0:
                raise ProtocolError(f"the agent exited with status {rc} after its final message")
            if proc.stdout.read():
                raise ProtocolError("the agent wrote after its final message")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            err.seek(0)
            stderr = _decode(err.read())
    run = {"start": start, "steps": steps, "final": final, "trailing_execs": trailing_execs,
           "transcript": transcript, "stderr": stderr}
    if session:
        run["turns"] = turns
    return run


def _check_final(start, steps, final):
    if final.get("end_type") not in ("submitted", "step_cap", "cost_limit", "context_window", "format_error", "error"):
        raise ProtocolError(f"final with an unknown end_type {final.get('end_type')!r}")
    sub = final.get("submission")
    if sub is not None and not isinstance(sub, str):
        raise ProtocolError("final.submission is not a string or null")
    messages = final.get("messages")
    if not isinstance(messages, list):
        raise ProtocolError("final.messages is not a list")
    split_final(start["messages"], steps, messages)


def split_final(prefix, steps, messages):
    """`(own, trailing)` of a final message list, which must be
    `prefix ++ own ++ step_1 ++ … ++ step_n ++ trailing` (docs/agent-protocol.md): `own` (the
    agent's system prompt and task) only after an empty prefix, `trailing` messages after the last
    step (a scaffold's exit notice) in no step. Raises ProtocolError when it does not fit."""
    if messages[:len(prefix)] != prefix:
        raise ProtocolError("final.messages does not start with the prefix the agent was handed")
    stepped = [m for s in steps for m in s["messages"]]
    rest = messages[len(prefix):]
    for own_len in range(len(rest) - len(stepped) + 1):
        if rest[own_len:own_len + len(stepped)] == stepped:
            if own_len and prefix:
                raise ProtocolError("final.messages has messages of its own after a non-empty prefix")
            return rest[:own_len], rest[own_len + len(stepped):]
    raise ProtocolError("final.messages is not the prefix, the agent's own messages, the steps' and trailing ones")


def initial_messages_of(run):
    """The messages a run started from (`h_0`): the prefix it was handed and its own messages."""
    prefix = run["start"]["messages"]
    own, _ = split_final(prefix, run["steps"], run["final"]["messages"])
    return list(prefix) + own


def prefix_at(run, t):
    """The message prefix h_t of a recorded run: its initial messages and its first t steps'."""
    if not 0 <= t <= len(run["steps"]):
        raise ValueError(f"t={t} is outside 0..{len(run['steps'])}")
    return list(initial_messages_of(run)) + [m for s in run["steps"][:t] for m in s["messages"]]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m vcurve_agents.driver", description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--workdir", help="run commands in this local folder")
    where.add_argument("--container", help="run commands in this running container (docker exec)")
    ap.add_argument("--task", required=True, help="the task JSON (deploy/images/build --print-task)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=30)
    ap.add_argument("--model", default="{}", help="the model object, JSON (e.g. '{\"q\": 0.5}')")
    ap.add_argument("--resume", help="a run JSON this driver wrote: resume it from h_t (with --t)")
    ap.add_argument("--t", type=int, help="with --resume: the prefix h_t to resume from")
    ap.add_argument("--instruction", action="append", dest="instructions", metavar="TEXT",
                    help="run a session: instruction k opens turn k (repeat the option, in order)")
    ap.add_argument("--session", action="store_true",
                    help="run a session of the task-state study's four instructions")
    ap.add_argument("agent", nargs="*", help="the agent's argument vector (default: the scripted agent)")
    args = ap.parse_args(argv)
    with open(args.task) as f:
        task = json.load(f)
    messages = []
    if args.resume:
        with open(args.resume) as f:
            messages = prefix_at(json.load(f), args.t if args.t is not None else 0)
    start = make_start(task, messages, budget=args.budget, seed=args.seed, model=json.loads(args.model))
    if args.container:
        executor = DockerExecutor(args.container, task.get("workdir", "/"))
    else:
        executor = LocalExecutor(args.workdir)
    instructions = args.instructions
    if args.session:
        instructions = (instructions or []) + list(SESSION_INSTRUCTIONS)
    run = drive(start, executor, argv=args.agent or None, instructions=instructions)
    sys.stderr.write(run["stderr"])
    json.dump(run, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
