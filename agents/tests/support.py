"""Shared helpers of the agents' tests: the task's sources, a local testbed, runs of the agent.

Everything runs locally: a temporary copy of deploy/images/task-calc/testbed made into a git
repository as the image makes it, commands through the driver's LocalExecutor (`bash -c` in that
copy), the hidden tests judged with the task's own evaluator command, its paths pointed at the
copies. No Docker.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from vcurve_agents import driver, protocol, scripted

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TASK_DIR = os.path.join(REPO, "deploy", "images", "task-calc")
TESTBED_SRC = os.path.join(TASK_DIR, "testbed")
HIDDEN_TESTS = os.path.join(TASK_DIR, "hidden_tests")

with open(os.path.join(TASK_DIR, "task.json")) as f:
    TASK = json.load(f)

_GIT_ENV = {"GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


class Sandbox:
    """A temporary folder holding fresh testbeds, and a PATH whose `python3` is this interpreter.

    (The image's python3 is /usr/bin/python3; here it is the interpreter running the tests, found
    first on PATH so that commands do not go through a slow wrapper such as pyenv's shim.)
    """

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="vcurve-agents-test-")
        bindir = os.path.join(self.root, "bin")
        os.mkdir(bindir)
        os.symlink(sys.executable, os.path.join(bindir, "python3"))
        self.env = dict(os.environ)
        self.env["PATH"] = bindir + os.pathsep + self.env.get("PATH", "")
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.env.pop("PYTHONPATH", None)
        self.count = 0

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def testbed(self):
        """A fresh copy of the task's /testbed: a git repository with one commit, as in the image."""
        self.count += 1
        path = os.path.join(self.root, f"testbed-{self.count}")
        shutil.copytree(TESTBED_SRC, path, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        env = {**self.env, **_GIT_ENV}
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "config", "user.name", "vcurve task"],
                    ["git", "config", "user.email", "task@vcurve.invalid"], ["git", "add", "-A"],
                    ["git", "commit", "-q", "-m", "calc"]):
            subprocess.run(cmd, cwd=path, env=env, check=True, stdout=subprocess.DEVNULL)
        return path

    def executor(self, workdir):
        return driver.LocalExecutor(workdir, env=self.env)

    def run(self, seed, model=None, messages=(), budget=30, workdir=None):
        """One run of the scripted agent (a subprocess) in `workdir` (default: a fresh testbed)."""
        workdir = workdir or self.testbed()
        start = driver.make_start(TASK, messages, budget=budget, seed=seed, model=model)
        env = {**self.env, "PYTHONPATH": driver.AGENTS_DIR}
        run = driver.drive(start, self.executor(workdir), env=env)
        run["workdir"] = workdir
        return run

    def replay(self, run, t):
        """A fresh testbed with the commands of the run's first t steps re-executed: the state h_t."""
        workdir = self.testbed()
        ex = self.executor(workdir)
        for step in run["steps"][:t]:
            for action in step["actions"]:
                ex.run(action["command"], action["timeout_s"])
        return workdir

    def resume(self, run, t, seed, model=None, budget=30):
        """A continuation of `run` from h_t: the prefix h_t, in a testbed at the state h_t."""
        return self.run(seed, model, driver.prefix_at(run, t), budget=budget, workdir=self.replay(run, t))

    def evaluate(self, patch):
        """Whether `patch` resolves the task: applied to a fresh testbed, judged by the evaluator."""
        if not patch:
            return False
        workdir = self.testbed()
        subprocess.run(["git", "apply", "-"], cwd=workdir, input=patch.encode(), check=True)
        command = TASK["evaluator"]["command"]
        assert "/testbed" in command and "/opt/vcurve-task/hidden_tests" in command, command
        command = command.replace("/opt/vcurve-task/hidden_tests", HIDDEN_TESTS).replace("/testbed", workdir)
        proc = subprocess.run(["bash", "-c", command], env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=TASK["evaluator"]["timeout_s"])
        return proc.returncode == 0


def assistant_contents(messages):
    return [m["content"] for m in messages if m["role"] == "assistant"]


_MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "<timestamp>"),
    (re.compile(r"\b\d+\.\d+s\b"), "<duration>"),
]


def normalize(text):
    """A stand-in for replay's normalization: mask timestamps and durations, order the lines."""
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return sorted(text.splitlines())


class FakeChannel:
    """The AgentChannel interface in-process, with commands answered by `answer(command)`.

    For the Monte Carlo checks, where the agent's decisions (which do not depend on outputs) are
    what is counted, not the commands' effects.
    """

    def __init__(self, start, answer=lambda command: ""):
        self._start = start
        self.answer = answer
        self.steps = []
        self.final_message = None

    def start(self):
        self.started = protocol.parse_start(self._start)
        return self.started

    def exec(self, command, timeout_s):
        return protocol.ExecResult(output=self.answer(command), returncode=0, timed_out=False, exception=None)

    def step(self, messages):
        assert len(self.steps) < self.started.budget
        self.steps.append(messages)

    @property
    def steps_left(self):
        return self.started.budget - len(self.steps)

    def final(self, end_type, submission, messages):
        self.final_message = {"end_type": end_type, "submission": submission, "messages": messages}


def run_in_process(seed, model=None, messages=(), budget=30):
    """One run of the agent's logic in this process with empty command outputs; returns the channel."""
    answer = lambda c: scripted.SUBMIT_MARKER + "\n" if c == scripted.SUBMIT_COMMAND else ""  # noqa: E731
    channel = FakeChannel(driver.make_start(TASK, messages, budget=budget, seed=seed, model=model), answer)
    scripted.run(channel)
    return channel
