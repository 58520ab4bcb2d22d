"""mini-swe-agent 2.4.6 as vcurve's agent process: a run resumed from a recorded step.

Run it under the virtual environment that scripts/mini-swe-agent-venv makes:

    PYTHONPATH=agents .venv/mini-swe-agent/bin/python -m vcurve_agents.mini_swe_agent

It speaks the agent process protocol (docs/agent-protocol.md). mini-swe-agent cannot resume a run
from a step; this adapter does it with mini-swe-agent's own code (`DefaultAgent`, `LitellmModel`
with the bash tool, the SWE-bench configuration `config/benchmarks/swebench.yaml`) and three
changes:

- **Resuming** (`ResumingAgent.resume`): instead of `DefaultAgent.run`, which starts from an empty
  message list, the agent's `messages` are the start message's prefix exactly as handed over (a
  deep copy: nothing added, nothing dropped, `extra` kept); the model call counter `n_calls` is the
  prefix's model calls (`start.t`: one step per call, format errors included); the cost is the sum
  of the prefix's recorded `extra.cost`; the count of consecutive format errors is the number of
  format-error messages (`extra.interrupt_type == "FormatError"`) that end the prefix; the step
  limit is `t + budget`, so exactly `budget` (= B − t) model calls remain. Then mini-swe-agent's
  own loop runs. An empty prefix (a base run with no recorded run of the task) renders
  mini-swe-agent's SWE-bench system and instance templates with the task's problem statement, as
  `mini-extra swebench` does; those two messages are the run's `own` messages.
- **The environment** (`ProtocolEnvironment`): `execute` sends the command to the worker (`exec`)
  with the configured timeout (60 s, the SWE-bench configuration's, or `model.timeout_s`) instead
  of running docker or a subprocess, and builds mini-swe-agent's output dict from the result as its
  docker and local environments do (a timeout: return code -1 and the `TimeoutExpired` exception
  text); the submission check is mini-swe-agent's own (`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on
  the first line, return code 0).
- **The model settings** come from the start message's `model` object (below), with the run's seed
  passed as `seed`, both as a litellm argument and in `extra_body`, so that `drop_params` cannot
  drop it: the tests check that it reaches the server's request body.

Each model call is one protocol `step`, whose messages are those mini-swe-agent appended for it: the
assistant message and its `tool` observations, or the format-error message (which carries the
reply in `extra.response`). mini-swe-agent's `exit` message goes after the last step, as a
trailing message. Message dicts are mini-swe-agent's own, `extra` included.

Sessions (a start with `"turns": true`, docs/agent-protocol.md): the agent takes up the prefix
(or renders its templates) once; each instruction is appended as a user message and
mini-swe-agent's loop runs on with the turn's budget. A turn ends where mini-swe-agent would
finish, its submission (`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`): its exit message is dropped and
the submitting call's observations added (the next user message must follow a complete tool
exchange), and the report is its last assistant message's text. Any other exit ends the session
with that exit's `final`, as a single run's. After the worker's `end`, `final` carries the last
turn's submission.

Exits, mini-swe-agent's exit status → the protocol's end type (as vcurve's importer reads them):

    Submitted                         submitted       submission: the output after the marker line
    LimitsExceeded, cost limit hit    cost_limit      submission ""
    LimitsExceeded (the step limit)   step_cap        submission ""
    RepeatedFormatError               format_error    submission ""
    ContextWindowExceededError        context_window  submission ""
    any other exception of the agent  error           submission ""

A model server that cannot be reached or keeps failing (after mini-swe-agent's retries) is an
infrastructure failure, not the agent's: the adapter then exits with status 3 without a `final`,
so the run has no outcome. So does a broken protocol (status 2) and invalid settings (status 2).

The `model` object (unknown keys are ignored):

    model_name       litellm model name, e.g. "openai/Qwen/Qwen3-32B" or          (required)
                     "hosted_vllm/…" (`name` is accepted too)
    base_url         the OpenAI-compatible server, e.g. http://host:8000/v1       (litellm's default)
                     (`api_base` is accepted too)
    api_key          the key, or api_key_env: the name of an environment          "EMPTY"
                     variable holding it
    temperature      sampling temperature (null: send none, the server's default)  0.70
    top_p            nucleus sampling (null: send none)                           0.80
    model_kwargs     more litellm arguments, laid over the defaults               {}
                     (drop_params: true, parallel_tool_calls: true, as swebench.yaml)
    timeout_s        every command's timeout, seconds                             60
    cost_limit       mini-swe-agent's cost limit (0: none)                        3.0
    max_consecutive_format_errors                                                 3
    cost_tracking    mini-swe-agent's cost_tracking                               "ignore_errors"

vLLM takes a signed 64-bit seed; a run's seed is unsigned, so one at or above 2**63 is sent as
`seed % 2**63` (`request_seed`).
"""

import copy
import os
import sys

if __name__ == "__main__":
    # stdout carries protocol messages only: keep the real stdout for them and point file
    # descriptor 1 (and sys.stdout) at stderr before anything (mini-swe-agent, litellm) can print.
    _PROTOCOL_OUT = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
else:
    _PROTOCOL_OUT = None

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import

import yaml  # noqa: E402  (mini-swe-agent's dependency)

from . import protocol  # noqa: E402

MSA_VERSION = "2.4.6"
DEFAULT_TIMEOUT_S = 60
DEFAULT_TEMPERATURE = 0.70
DEFAULT_TOP_P = 0.80
EXIT_NO_OUTCOME = 3


class ParameterError(ValueError):
    pass


def request_seed(seed):
    """The seed sent to the server: the run's seed, folded into vLLM's signed 64-bit range."""
    return seed % (2**63)


def prefix_state(messages):
    """(model calls, cost, consecutive format errors at the end) recorded in a message prefix."""
    calls = cost = 0
    trailing_format_errors = 0
    for m in messages:
        extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
        is_format_error = m.get("role") == "user" and extra.get("interrupt_type") == "FormatError"
        if m.get("role") == "assistant" or is_format_error:
            calls += 1
            c = extra.get("cost", 0.0)
            if isinstance(c, (int, float)) and not isinstance(c, bool):
                cost += c
        if is_format_error:
            trailing_format_errors += 1
        elif m.get("role") == "assistant":
            trailing_format_errors = 0
    return calls, float(cost), trailing_format_errors


def end_type_of(exit_status, cost, cost_limit):
    """The protocol's end type of a mini-swe-agent exit status."""
    if exit_status == "Submitted":
        return "submitted"
    if exit_status == "LimitsExceeded":
        return "cost_limit" if 0 < cost_limit <= cost else "step_cap"
    if exit_status in ("RepeatedFormatError", "FormatError"):
        return "format_error"
    if "ContextWindow" in exit_status:
        return "context_window"
    return "error"


class Settings:
    """The validated settings of the start message's `model` object."""

    def __init__(self, model, seed):
        model = dict(model or {})
        self.model_name = model.get("model_name") or model.get("name")
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ParameterError("model.model_name (the litellm model name, e.g. openai/NAME) is required")
        kwargs = {"drop_params": True, "parallel_tool_calls": True}
        base_url = model.get("base_url") or model.get("api_base")
        if base_url is not None:
            if not isinstance(base_url, str):
                raise ParameterError(f"model.base_url must be a string, got {base_url!r}")
            kwargs["api_base"] = base_url
        api_key = model.get("api_key")
        if api_key is None and model.get("api_key_env"):
            api_key = os.environ.get(str(model["api_key_env"]))
            if api_key is None:
                raise ParameterError(f"model.api_key_env names {model['api_key_env']!r}, which is not set")
        kwargs["api_key"] = api_key if api_key is not None else "EMPTY"
        for key, default in (("temperature", DEFAULT_TEMPERATURE), ("top_p", DEFAULT_TOP_P)):
            # null: send none (the server's default), as a recorded run that named none did.
            value = model.get(key, default)
            if value is not None:
                kwargs[key] = _number(value, key)
        extra = model.get("model_kwargs") or {}
        if not isinstance(extra, dict):
            raise ParameterError(f"model.model_kwargs must be an object, got {extra!r}")
        kwargs.update(extra)
        self.seed = request_seed(seed)
        kwargs["seed"] = self.seed
        kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), "seed": self.seed}
        self.model_kwargs = kwargs
        self.timeout_s = _number(model.get("timeout_s", DEFAULT_TIMEOUT_S), "timeout_s", positive=True)
        self.cost_limit = _number(model.get("cost_limit", 3.0), "cost_limit")
        fe = model.get("max_consecutive_format_errors", 3)
        if isinstance(fe, bool) or not isinstance(fe, int) or fe < 0:
            raise ParameterError(f"model.max_consecutive_format_errors must be an integer >= 0, got {fe!r}")
        self.max_consecutive_format_errors = fe
        self.cost_tracking = model.get("cost_tracking", "ignore_errors")


def _number(x, name, positive=False):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (positive and not x > 0) or x < 0:
        raise ParameterError(f"model.{name} must be a {'positive' if positive else 'non-negative'} number, got {x!r}")
    return x


def swebench_config():
    """mini-swe-agent's SWE-bench configuration (its `agent`, `environment` and `model` sections)."""
    from minisweagent.config import builtin_config_dir

    with open(builtin_config_dir / "benchmarks" / "swebench.yaml") as f:
        return yaml.safe_load(f)


def build(channel, start, settings):
    """The agent, its model and its environment for this run."""
    from minisweagent.models.litellm_model import LitellmModel

    config = swebench_config()
    model_config = {k: v for k, v in config["model"].items() if k not in ("model_name", "model_kwargs")}
    model = LitellmModel(model_name=settings.model_name, model_kwargs=settings.model_kwargs,
                         cost_tracking=settings.cost_tracking, **model_config)
    env_config = {k: v for k, v in config["environment"].items() if k in ("cwd", "env", "interpreter")}
    env_config["cwd"] = start.task.get("workdir") or env_config.get("cwd", "")
    env_class, agent_class = _classes()
    env = env_class(channel, timeout=settings.timeout_s, container=start.raw.get("container"), **env_config)
    agent_config = dict(config["agent"])
    agent_config.update(cost_limit=settings.cost_limit,
                        max_consecutive_format_errors=settings.max_consecutive_format_errors)
    return agent_class(model, env, channel, **agent_config)


def _classes():
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.exceptions import FormatError, InterruptAgentFlow, LimitsExceeded
    from minisweagent.utils.serialize import recursive_merge
    from pydantic import BaseModel

    class ProtocolEnvironmentConfig(BaseModel):
        cwd: str = ""
        """The task's working directory (the worker runs every command there; informational)."""
        env: dict[str, str] = {}
        """The configuration's environment variables (the worker's exec path sets the task's)."""
        timeout: float = DEFAULT_TIMEOUT_S
        """Every command's timeout, seconds."""
        interpreter: list[str] = ["bash", "-lc"]
        """The configuration's interpreter (the worker runs commands with the trajectory's)."""

    class ProtocolEnvironment:
        """A mini-swe-agent environment whose `execute` goes through the worker (`exec`)."""

        def __init__(self, channel, *, config_class=ProtocolEnvironmentConfig, container=None, **kwargs):
            self.channel = channel
            self.container = container
            self.config = config_class(**kwargs)
            # The outputs of the current model call's commands (a session turns a submission's
            # into the call's observations, which a Submitted exit leaves out).
            self.outputs = []

        def execute(self, action, cwd="", *, timeout=None):
            command = action.get("command", "")
            timeout = timeout or self.config.timeout
            if isinstance(timeout, float) and timeout.is_integer():
                timeout = int(timeout)
            result = self.channel.exec(command, timeout)
            if result.timed_out or result.returncode is None or result.exception:
                if result.timed_out:
                    # subprocess.TimeoutExpired's text for the `docker exec` DockerEnvironment runs.
                    kind, why = "TimeoutExpired", f"Command '{self.docker_exec(command)}' timed out after {timeout} seconds"
                else:
                    kind, why = "ExecError", result.exception or "the command did not finish"
                output = {
                    "output": result.output,
                    "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: {why}",
                    "extra": {"exception_type": kind, "exception": why},
                }
            else:
                output = {"output": result.output, "returncode": result.returncode, "exception_info": ""}
            self.outputs.append(output)
            self._check_finished(output)
            return output

        def docker_exec(self, command):
            """The argument list mini-swe-agent's DockerEnvironment runs a command with, in the
            run's container (the worker's, named in `start.container`)."""
            argv = ["docker", "exec", "-w", self.config.cwd]
            for key, value in self.config.env.items():
                argv += ["-e", f"{key}={value}"]
            return argv + [self.container or "", *self.config.interpreter, command]

        # mini-swe-agent's own submission check (the same in its docker and local environments).
        _check_finished = LocalEnvironment._check_finished

        def get_template_vars(self, **kwargs):
            return recursive_merge(self.config.model_dump(), kwargs)

        def serialize(self):
            return {"info": {"config": {
                "environment": self.config.model_dump(mode="json"),
                "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
            }}}

    class ResumingAgent(DefaultAgent):
        """mini-swe-agent's DefaultAgent, resumed from a message prefix, reporting its steps."""

        def __init__(self, model, env, channel, **kwargs):
            super().__init__(model, env, **kwargs)
            self.channel = channel
            self.error = None

        def query(self):
            # The protocol's budget is the limit (also when t + budget = 0, which mini-swe-agent's
            # step_limit would read as "no limit").
            if self.channel.steps_left <= 0:
                raise LimitsExceeded({"role": "exit", "content": "LimitsExceeded",
                                      "extra": {"exit_status": "LimitsExceeded", "submission": ""}})
            return super().query()

        def resume(self, prefix, t, budget, task):
            """Run from `prefix` (t model calls in it, `budget` left) to an exit; return its extra."""
            self.begin(prefix, t, task)
            return self.loop(budget)

        def begin(self, prefix, t, task):
            """Take up `prefix` (t model calls in it), or start afresh from the templates."""
            self.extra_template_vars |= {"task": task}
            if prefix:
                self.messages = copy.deepcopy(prefix)
            else:
                self.messages = []
                self.add_messages(
                    self.model.format_message(role="system", content=self._render_template(self.config.system_template)),
                    self.model.format_message(role="user", content=self._render_template(self.config.instance_template)),
                )
            calls, cost, format_errors = prefix_state(prefix)
            if calls != t:
                protocol.log(f"mini-swe-agent: the prefix records {calls} model calls, start says t={t}; going by t")
            self.n_calls = t
            self.cost = cost
            self.n_consecutive_format_errors = format_errors

        def loop(self, budget):
            """DefaultAgent.run's loop with `budget` more model calls, reporting each as a step, to
            an exit; return the exit message's extra (the exit message ends the list)."""
            self.config.step_limit = self.n_calls + budget
            while True:
                before, calls_before = len(self.messages), self.n_calls
                self.env.outputs = []
                try:
                    self.step()
                    self.n_consecutive_format_errors = 0
                except protocol.ProtocolError:
                    raise
                except FormatError as e:
                    self.cost += e.messages[0].get("extra", {}).get("cost", 0.0)
                    self.n_consecutive_format_errors += 1
                    if 0 < self.config.max_consecutive_format_errors <= self.n_consecutive_format_errors:
                        self.add_messages(*e.messages, {
                            "role": "exit",
                            "content": "RepeatedFormatError",
                            "extra": {"exit_status": "RepeatedFormatError", "submission": ""},
                        })
                    else:
                        self.add_messages(*e.messages)
                except InterruptAgentFlow as e:
                    self.add_messages(*e.messages)
                except Exception as e:
                    self.handle_uncaught_exception(e)
                    self.error = e
                new = self.messages[before:]
                stepped = [m for m in new if m.get("role") != "exit"]
                if self.n_calls > calls_before and stepped:
                    self.channel.step(stepped)
                if self.messages[-1].get("role") == "exit":
                    break
            return self.messages[-1].get("extra", {})

    return ProtocolEnvironment, ResumingAgent


def _is_context_window(e):
    return any("ContextWindow" in c.__name__ for c in type(e).__mro__)


def is_infrastructure_failure(e):
    """Whether the exception the agent stopped on is the model server's failure (litellm's, the
    OpenAI client's, the HTTP client's), not the agent's: an exceeded context window is the agent's."""
    if e is None or _is_context_window(e):
        return False
    return any(c.__module__.split(".")[0] in ("litellm", "openai", "httpx") for c in type(e).__mro__)


def _text(message):
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content.strip() if isinstance(content, str) else ""


def end_turn(agent):
    """A turn that mini-swe-agent ended by submitting: drop its exit message, add the submitting
    call's observations (which a Submitted exit leaves out, so the next instruction follows a
    complete tool exchange), and return the report: the text of its last assistant message, else
    the submission, else a note that it said nothing."""
    exit_message = agent.messages.pop()
    reply = next((m for m in reversed(agent.messages) if m.get("role") == "assistant"), {})
    if agent.env.outputs:
        agent.add_messages(*agent.model.format_observation_messages(reply, agent.env.outputs,
                                                                    agent.get_template_vars()))
    return (_text(reply) or _text(exit_message)
            or "(mini-swe-agent ended the turn without a message and with an empty submission)")


def run_session(channel, start, settings, agent):
    """A session: per instruction, the instruction appended as a user message and mini-swe-agent's
    loop with the turn's budget; a submission ends the turn (turn_end, the report its last message),
    any other exit ends the session (final). After end, the last submission is the final's."""
    agent.begin(start.messages, start.t, start.task.get("problem_statement") or "")
    submission = ""
    while (instruction := channel.next_instruction()) is not None:
        agent.add_messages(agent.model.format_message(role="user", content=instruction.content))
        extra = agent.loop(instruction.budget)
        if is_infrastructure_failure(agent.error):
            protocol.log(f"mini-swe-agent: the model server failed in turn {instruction.turn} "
                         f"({type(agent.error).__name__}: {agent.error}); no final: the run has no outcome")
            return EXIT_NO_OUTCOME
        status = extra.get("exit_status", "")
        if status != "Submitted":
            end_type = end_type_of(status, agent.cost, agent.config.cost_limit)
            protocol.log(f"mini-swe-agent: turn {instruction.turn} ended with {status} -> {end_type}: the session ends")
            channel.final(end_type, "", agent.messages)
            return 0
        submission = extra.get("submission", "")
        report = end_turn(agent)
        protocol.log(f"mini-swe-agent: turn {instruction.turn} submitted after {agent.n_calls} model calls")
        channel.turn_end(report, agent.messages)
    channel.final("submitted", submission, agent.messages)
    return 0


def run(channel):
    """One run: from the start message to the final message. Returns the process's exit status."""
    start = channel.start()
    settings = Settings(start.model, start.seed)
    agent = build(channel, start, settings)
    if start.turns:
        protocol.log(f"mini-swe-agent {MSA_VERSION}: a session of task {start.task.get('id')}, "
                     f"budget {start.budget} per turn, seed {start.seed}, model {settings.model_name}")
        return run_session(channel, start, settings, agent)
    protocol.log(f"mini-swe-agent {MSA_VERSION}: task {start.task.get('id')}, t={start.t}, budget {start.budget}, "
                 f"seed {start.seed} (sent as {settings.seed}), model {settings.model_name}, "
                 f"{len(start.messages)} prefix messages")
    extra = agent.resume(start.messages, start.t, start.budget, start.task.get("problem_statement") or "")
    if is_infrastructure_failure(agent.error):
        protocol.log(f"mini-swe-agent: the model server failed ({type(agent.error).__name__}: {agent.error}); "
                     "no final: the run has no outcome")
        return EXIT_NO_OUTCOME
    status = extra.get("exit_status", "")
    end_type = end_type_of(status, agent.cost, agent.config.cost_limit)
    submission = extra.get("submission", "") if end_type == "submitted" else ""
    protocol.log(f"mini-swe-agent: exit status {status} -> {end_type} after {agent.n_calls} model calls "
                 f"({channel.steps} steps here), cost {agent.cost}")
    channel.final(end_type, submission, agent.messages)
    return 0


def main():
    channel = protocol.AgentChannel(writer=_PROTOCOL_OUT)
    try:
        return run(channel)
    except ParameterError as e:
        protocol.log(f"mini-swe-agent: invalid settings: {e}")
        return 2
    except protocol.ProtocolError as e:
        protocol.log(f"mini-swe-agent: protocol error: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
