"""The mini-swe-agent adapter (vcurve_agents.mini_swe_agent) against a mock OpenAI server.

The real mini-swe-agent 2.4.6 code runs: the adapter is a subprocess under the virtual environment
scripts/mini-swe-agent-venv makes (VCURVE_MSA_PYTHON, else .venv/mini-swe-agent/bin/python in the
repository), its model calls go to tests/mock_openai.py over HTTP, and vcurve_agents.driver plays the
worker's side of the protocol, running commands with `bash -c` in a local copy of the test task (support.py).
Without the virtual environment these tests skip, saying so (they fail under VCURVE_TEST_REQUIRE=all,
as in scripts/test): run scripts/mini-swe-agent-venv.
"""

import json
import os
import subprocess
import tempfile
import unittest

from vcurve_agents import driver

from . import mock_openai, require, support

VENV_PYTHON = os.path.join(support.REPO, ".venv", "mini-swe-agent", "bin", "python")


def msa_python():
    path, = require.require(require.MINI_SWE_AGENT)
    return path


def split_final(run):
    """(own, trailing) of a run's final messages (driver.split_final)."""
    return driver.split_final(run["start"]["messages"], run["steps"], run["final"]["messages"])


def without_extra(messages):
    """Messages as mini-swe-agent sends them: without `extra` (LitellmModel drops it), and without
    the keys whose value is null (the assistant messages' `function_call` and
    `provider_specific_fields`, which the HTTP request leaves out, in base runs as in continuations)."""
    return [{k: v for k, v in m.items() if k != "extra" and v is not None} for m in messages]


class AdapterCase(unittest.TestCase):
    policy = mock_openai.Policy()

    @classmethod
    def setUpClass(cls):
        cls.python = msa_python()
        cls.sandbox = support.Sandbox()
        cls.server = mock_openai.MockOpenAI(cls.policy)
        config_dir = os.path.join(cls.sandbox.root, "mswea-config")
        os.mkdir(config_dir)
        cls.env = {**cls.sandbox.env, "PYTHONPATH": driver.AGENTS_DIR, "MSWEA_GLOBAL_CONFIG_DIR": config_dir,
                   "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}

    @classmethod
    def tearDownClass(cls):
        cls.server.close()
        cls.sandbox.close()

    def model(self, **more):
        return {"model_name": "openai/mock-model", "base_url": self.server.base_url, "api_key": "not-a-key", **more}

    def run_adapter(self, seed, messages=(), t=0, budget=30, workdir=None, model=None):
        """One run; returns it with the requests the server got during it."""
        workdir = workdir or self.sandbox.testbed()
        start = driver.make_start(support.TASK, messages, t=t, budget=budget, seed=seed,
                                  model=model or self.model())
        first = len(self.server.requests)
        # The worker's side of the protocol, with its rules: status 0 after final, nothing written
        # after it, final.messages = prefix ++ own ++ steps ++ trailing.
        run = driver.drive(start, self.sandbox.executor(workdir), argv=[self.python, "-m", "vcurve_agents.mini_swe_agent"],
                           env=self.env)
        run["requests"] = self.server.requests[first:]
        run["workdir"] = workdir
        return run

    def replay(self, run, t):
        """A fresh testbed with the commands of the run's first t steps run again: the state h_t."""
        workdir = self.sandbox.testbed()
        ex = self.sandbox.executor(workdir)
        for step in run["steps"][:t]:
            for action in step["actions"]:
                ex.run(action["command"], action["timeout_s"])
        return workdir

    def resume(self, run, t, seed, budget=30, model=None):
        return self.run_adapter(seed, driver.prefix_at(run, t), t=t, budget=budget,
                                workdir=self.replay(run, t), model=model)


class TestBaseRun(AdapterCase):
    """(a) A base run from h_0 (empty prefix) ends with a submission."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.seed = 11
        cls.result = None

    def base(self):
        if TestBaseRun.result is None:
            TestBaseRun.result = self.run_adapter(self.seed)
        return TestBaseRun.result

    def test_submits(self):
        run = self.base()
        final = run["final"]
        self.assertEqual(final["end_type"], "submitted", run["stderr"][-4000:])
        explore = self.policy.explore
        self.assertEqual(len(run["steps"]), explore + 3)
        self.assertEqual(len(run["requests"]), explore + 3)
        self.assertIn("diff --git a/calc/parse.py b/calc/parse.py", final["submission"])
        fix = self.policy.fix_of(self.seed)
        self.assertEqual(self.sandbox.evaluate(final["submission"]), fix == "correct")
        # The submitting step is the assistant message alone; mini-swe-agent's exit message trails.
        own, trailing = split_final(run)
        self.assertEqual(run["steps"][-1]["messages"][0]["role"], "assistant")
        self.assertEqual(len(run["steps"][-1]["messages"]), 1)
        self.assertEqual([m["role"] for m in trailing], ["exit"])
        self.assertEqual(trailing[0]["extra"]["exit_status"], "Submitted")
        self.assertEqual(trailing[0]["extra"]["submission"], final["submission"])
        self.assertEqual(run["steps"][-1]["actions"][0]["command"], mock_openai.SUBMIT)

    def test_own_messages_are_the_swebench_templates(self):
        run = self.base()
        own, _ = split_final(run)
        self.assertEqual([m["role"] for m in own], ["system", "user"])
        self.assertTrue(own[0]["content"].startswith("You are a helpful assistant that can interact with a computer"))
        self.assertIn("<pr_description>\nConsider the following PR description:\n" + support.TASK["problem_statement"],
                      own[1]["content"])
        self.assertIn("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt", own[1]["content"])
        self.assertEqual(without_extra(own), run["requests"][0]["messages"])

    def test_messages_are_mini_swe_agents(self):
        run = self.base()
        for step, request in zip(run["steps"], run["requests"]):
            assistant = step["messages"][0]
            self.assertEqual(assistant["role"], "assistant")
            actions = assistant["extra"]["actions"]
            self.assertEqual([a["command"] for a in actions], [a["command"] for a in step["actions"]])
            self.assertIn("response", assistant["extra"])
            for obs, action, ran in zip(step["messages"][1:], actions, step["actions"]):
                self.assertEqual((obs["role"], obs["tool_call_id"]), ("tool", action["tool_call_id"]))
                self.assertEqual(obs["extra"]["raw_output"], ran["output"])
                self.assertEqual(obs["extra"]["returncode"], ran["returncode"])
                self.assertIn(f"<returncode>{ran['returncode']}</returncode>", obs["content"])
            for ran in step["actions"]:
                self.assertEqual(ran["timeout_s"], 60)

    def test_seed_and_sampling_reach_the_server(self):
        # (c) every request of the run carries the run's seed, and the paper's sampling settings.
        run = self.base()
        for request in run["requests"]:
            self.assertEqual(request.get("seed"), self.seed, sorted(request))
            self.assertEqual(request.get("temperature"), 0.7)
            self.assertEqual(request.get("top_p"), 0.8)
            self.assertEqual(request.get("model"), "mock-model")
            self.assertEqual([t["function"]["name"] for t in request.get("tools", [])], ["bash"])


class TestContinuation(AdapterCase):
    """(b) A continuation from h_t resumes the recorded run."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.base_seed = 21
        cls.base = None

    def base_run(self):
        if TestContinuation.base is None:
            TestContinuation.base = self.run_adapter(self.base_seed)
            self.assertEqual(TestContinuation.base["final"]["end_type"], "submitted")
        return TestContinuation.base

    def test_first_request_is_the_recorded_prefix_with_the_seed(self):
        base = self.base_run()
        for t in (1, self.policy.explore, len(base["steps"]) - 1):
            with self.subTest(t=t):
                seed = 1000 + t
                prefix = driver.prefix_at(base, t)
                resumed = self.resume(base, t, seed)
                first = resumed["requests"][0]
                self.assertEqual(first["messages"], without_extra(prefix))
                # ... which is the request the recorded run made for its step t + 1, but for the seed.
                self.assertEqual({k: v for k, v in first.items() if k != "seed"},
                                 {k: v for k, v in base["requests"][t].items() if k != "seed"})
                self.assertEqual(first["seed"], seed)
                self.assertTrue(all(r["seed"] == seed for r in resumed["requests"]))
                self.assertEqual(resumed["final"]["messages"][:len(prefix)], prefix)
                self.assertEqual(resumed["final"]["end_type"], "submitted")
                self.assertEqual(len(resumed["steps"]), len(base["steps"]) - t)

    def test_budget_leaves_exactly_b_minus_t_calls(self):
        base = self.base_run()
        B, t = 4, 2
        resumed = self.resume(base, t, seed=77, budget=B - t)
        self.assertEqual(len(resumed["requests"]), B - t)
        self.assertEqual(len(resumed["steps"]), B - t)
        self.assertEqual(resumed["final"]["end_type"], "step_cap")
        self.assertEqual(resumed["final"]["submission"], "")
        self.assertEqual(resumed["final"]["messages"][-1]["extra"]["exit_status"], "LimitsExceeded")
        # No budget: no model call at all.
        none = self.resume(base, t, seed=78, budget=0)
        self.assertEqual((none["requests"], none["steps"], none["final"]["end_type"]), ([], [], "step_cap"))

    def test_continuation_from_the_submitting_prefix_needs_one_call(self):
        base = self.base_run()
        t = len(base["steps"]) - 1
        resumed = self.resume(base, t, seed=self.base_seed)
        self.assertEqual(resumed["final"]["submission"], base["final"]["submission"])
        self.assertEqual(len(resumed["requests"]), 1)


class TestSession(AdapterCase):
    """A session: each instruction appended as a user message, a turn ending where mini-swe-agent
    submits, its report the last assistant message, the history valid for the next request."""

    INSTRUCTIONS = ["Investigate; do not modify code", "Implement a fix", "Run tests and report the result"]

    def test_turns_end_at_submissions_and_resume_with_the_instruction(self):
        workdir = self.sandbox.testbed()
        start = driver.make_start(support.TASK, budget=10, seed=11, model=self.model())
        first = len(self.server.requests)
        run = driver.drive(start, self.sandbox.executor(workdir), instructions=self.INSTRUCTIONS,
                           argv=[self.python, "-m", "vcurve_agents.mini_swe_agent"], env=self.env)
        requests = self.server.requests[first:]
        self.assertEqual(run["final"]["end_type"], "submitted", run["stderr"][-4000:])
        self.assertEqual([t["instruction"] for t in run["turns"]], self.INSTRUCTIONS)
        explore = self.policy.explore
        # The mock counts user messages after the task as format errors (model_calls), so instruction 1
        # takes the place of one exploring call; later turns submit at once.
        self.assertEqual([len(t["steps"]) for t in run["turns"]], [explore + 2, 1, 1])
        for turn in run["turns"]:
            last = run["steps"][turn["steps"][-1]]
            self.assertEqual(last["actions"][-1]["command"], mock_openai.SUBMIT)
            self.assertEqual(turn["report"], last["messages"][0]["content"].strip())
            self.assertNotIn("exit", [m["role"] for m in turn["messages"]], "the exit message is dropped")
            # The submitting call's observation closes the tool exchange.
            self.assertEqual(turn["messages"][-1]["role"], "tool")
        self.assertIn("diff --git a/calc/parse.py", run["final"]["submission"])
        # Turn k's first request ends with instruction k after the previous turn's complete exchange.
        opening = [requests[0]] + [requests[run["turns"][k]["steps"][0]] for k in (1, 2)]
        for k, request in enumerate(opening):
            self.assertEqual(request["messages"][-1], {"role": "user", "content": self.INSTRUCTIONS[k]})
            if k:
                self.assertEqual(request["messages"][-2]["role"], "tool")
                self.assertEqual(without_extra(run["turns"][k - 1]["messages"]) + [request["messages"][-1]],
                                 request["messages"])
        self.assertEqual([m["role"] for m in requests[0]["messages"]], ["system", "user", "user"])

    def test_a_turn_over_its_budget_ends_the_session(self):
        workdir = self.sandbox.testbed()
        start = driver.make_start(support.TASK, budget=2, seed=11, model=self.model())
        run = driver.drive(start, self.sandbox.executor(workdir), instructions=self.INSTRUCTIONS,
                           argv=[self.python, "-m", "vcurve_agents.mini_swe_agent"], env=self.env)
        self.assertEqual(run["final"]["end_type"], "step_cap")
        self.assertEqual((run["turns"], len(run["steps"])), ([], 2))


class TestCost(AdapterCase):
    def test_cost_is_restored_from_the_prefix(self):
        base = self.run_adapter(31, budget=3)
        prefix = driver.prefix_at(base, 2)
        for m in prefix:
            if m["role"] == "assistant":
                m["extra"]["cost"] = 0.3
        # 0.6 recorded, a cost limit of 0.5: the resumed agent stops before any model call.
        resumed = self.run_adapter(32, prefix, t=2, budget=5, workdir=self.replay(base, 2),
                                   model=self.model(cost_limit=0.5))
        self.assertEqual((resumed["requests"], resumed["steps"]), ([], []))
        self.assertEqual(resumed["final"]["end_type"], "cost_limit")
        # A limit above it leaves the calls to the budget.
        resumed = self.run_adapter(33, prefix, t=2, budget=1, workdir=self.replay(base, 2),
                                   model=self.model(cost_limit=0.7))
        self.assertEqual(len(resumed["requests"]), 1)
        self.assertEqual(resumed["final"]["end_type"], "step_cap")


class TestFunctions(unittest.TestCase):
    """The adapter's pure functions, in the virtual environment's interpreter."""

    def test_prefix_state_and_end_types(self):
        code = r"""
from vcurve_agents.mini_swe_agent import prefix_state, end_type_of, request_seed
fe = lambda: {"role": "user", "content": "Tool call error", "extra": {"interrupt_type": "FormatError", "cost": 0.5}}
a = lambda c: {"role": "assistant", "content": "x", "extra": {"cost": c}}
tool = {"role": "tool", "content": "out", "tool_call_id": "1", "extra": {}}
sys_, task = {"role": "system", "content": "s"}, {"role": "user", "content": "t"}
assert prefix_state([sys_, task]) == (0, 0.0, 0)
assert prefix_state([sys_, task, a(0.25), tool, fe(), fe()]) == (3, 1.25, 2)
assert prefix_state([sys_, task, fe(), a(0.0), tool]) == (2, 0.5, 0)
assert prefix_state([sys_, task, {"role": "assistant", "content": "no extra"}]) == (1, 0.0, 0)
assert end_type_of("Submitted", 0, 3) == "submitted"
assert end_type_of("LimitsExceeded", 3.5, 3.0) == "cost_limit"
assert end_type_of("LimitsExceeded", 1.0, 3.0) == "step_cap"
assert end_type_of("LimitsExceeded", 1.0, 0) == "step_cap"
assert end_type_of("RepeatedFormatError", 0, 3) == "format_error"
assert end_type_of("ContextWindowExceededError", 0, 3) == "context_window"
assert end_type_of("TimeExceeded", 0, 3) == "error"
assert end_type_of("RuntimeError", 0, 3) == "error"
assert request_seed(5) == 5 and request_seed(2**63) == 0 and request_seed(2**64 - 1) == 2**63 - 1
print("ok")
"""
        env = {**os.environ, "PYTHONPATH": driver.AGENTS_DIR, "MSWEA_GLOBAL_CONFIG_DIR": tempfile.gettempdir()}
        proc = subprocess.run([msa_python(), "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=env, timeout=120)
        self.assertEqual((proc.returncode, proc.stdout.decode().strip().splitlines()[-1:]), (0, ["ok"]),
                         proc.stdout.decode()[-3000:])


class TestContextWindow(AdapterCase):
    policy = mock_openai.Policy(context_window_at=2)

    def test_context_window_ends_the_run(self):
        run = self.run_adapter(8)
        self.assertEqual(run["final"]["end_type"], "context_window", run["stderr"][-3000:])
        self.assertEqual(run["final"]["submission"], "")
        # The failed call is no step (it appended no message but the exit).
        self.assertEqual(len(run["steps"]), 2)
        exit_message = run["final"]["messages"][-1]
        self.assertEqual(exit_message["role"], "exit")
        self.assertIn("ContextWindow", exit_message["extra"]["exit_status"])


class TestTimeout(AdapterCase):
    policy = mock_openai.Policy(commands={0: ["echo before; sleep 5; echo after"]})

    def test_a_command_that_times_out(self):
        run = self.run_adapter(9, budget=1, model=self.model(timeout_s=1))
        action = run["steps"][0]["actions"][0]
        self.assertEqual((action["timeout_s"], action["timed_out"], action["returncode"]), (1, True, None))
        obs = run["steps"][0]["messages"][1]
        self.assertEqual(obs["extra"]["returncode"], -1)
        self.assertEqual(obs["extra"]["exception_type"], "TimeoutExpired")
        self.assertIn("timed out after 1 seconds", obs["extra"]["exception_info"])
        # subprocess.TimeoutExpired's text for DockerEnvironment's `docker exec`, as the real run shows.
        self.assertIn("Command '['docker', 'exec', '-w', ", obs["extra"]["exception_info"])
        self.assertIn("'-e', 'PAGER=cat', ", obs["extra"]["exception_info"])
        self.assertIn("'bash', '-c', 'echo before; sleep 5; echo after']' timed out after 1 seconds",
                      obs["extra"]["exception_info"])
        self.assertIn("<exception>An error occurred while executing the command:", obs["content"])
        self.assertIn("before", obs["extra"]["raw_output"])
        self.assertEqual(run["final"]["end_type"], "step_cap")


class TestFormatErrors(AdapterCase):
    """Format errors are model calls (steps without actions), and their consecutive count resumes."""

    policy = mock_openai.Policy(format_errors={2, 3, 4})

    def test_repeated_format_errors_end_the_run(self):
        base = self.run_adapter(5)
        self.assertEqual(base["final"]["end_type"], "format_error")
        self.assertEqual(len(base["steps"]), 5)
        self.assertEqual(len(base["requests"]), 5)
        for step in base["steps"][2:]:
            self.assertEqual(step["actions"], [])
            self.assertEqual([m["role"] for m in step["messages"]], ["user"])
            self.assertEqual(step["messages"][0]["extra"]["interrupt_type"], "FormatError")
        self.assertEqual(base["final"]["messages"][-1]["extra"]["exit_status"], "RepeatedFormatError")

        # From h_4 (two format errors in a row at its end) one more ends the run: the count resumed.
        resumed = self.resume(base, 4, seed=6)
        self.assertEqual(resumed["requests"][0]["messages"], without_extra(driver.prefix_at(base, 4)))
        self.assertEqual(len(resumed["steps"]), 1)
        self.assertEqual(resumed["final"]["end_type"], "format_error")

        # From h_3 (one format error at its end) it takes two more.
        resumed = self.resume(base, 3, seed=7)
        self.assertEqual(len(resumed["steps"]), 2)
        self.assertEqual(resumed["final"]["end_type"], "format_error")


class TestSeed(AdapterCase):
    def test_large_seed_is_folded_into_int64(self):
        seed = 2**64 - 5
        run = self.run_adapter(seed, budget=1)
        self.assertEqual(run["requests"][0]["seed"], seed % 2**63)
        self.assertEqual(run["final"]["end_type"], "step_cap")

    def test_seed_reaches_a_vllm_provider(self):
        # litellm's hosted_vllm provider with drop_params: the seed is still in the request body.
        run = self.run_adapter(2**40 + 1, budget=1, model=self.model(model_name="hosted_vllm/mock-model"))
        self.assertEqual(run["requests"][0]["seed"], 2**40 + 1)
        self.assertEqual(run["requests"][0]["model"], "mock-model")

    def test_settings_from_the_model_object(self):
        run = self.run_adapter(3, budget=1, model=self.model(temperature=0.2, top_p=0.5, timeout_s=7))
        request = run["requests"][0]
        self.assertEqual((request["temperature"], request["top_p"], request["seed"]), (0.2, 0.5, 3))
        self.assertTrue(all(a["timeout_s"] == 7 for a in run["steps"][0]["actions"]))


class TestFailures(unittest.TestCase):
    def test_no_model_name_is_no_outcome(self):
        start = driver.make_start(support.TASK, budget=3, seed=1, model={})
        env = {**os.environ, "PYTHONPATH": driver.AGENTS_DIR, "MSWEA_GLOBAL_CONFIG_DIR": tempfile.gettempdir()}
        proc = subprocess.run([msa_python(), "-m", "vcurve_agents.mini_swe_agent"],
                              input=(json.dumps(start) + "\n").encode(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, timeout=120)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stdout, b"")
        self.assertIn(b"model_name", proc.stderr)

    def test_unreachable_server_is_no_outcome(self):
        start = driver.make_start(support.TASK, budget=3, seed=1, model={
            "model_name": "openai/mock-model", "base_url": "http://127.0.0.1:9/v1", "api_key": "x"})
        env = {**os.environ, "PYTHONPATH": driver.AGENTS_DIR, "MSWEA_GLOBAL_CONFIG_DIR": tempfile.gettempdir(),
               "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}
        proc = subprocess.run([msa_python(), "-m", "vcurve_agents.mini_swe_agent"],
                              input=(json.dumps(start) + "\n").encode(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env, timeout=120)
        self.assertEqual(proc.returncode, 3, proc.stderr.decode()[-2000:])
        self.assertEqual(proc.stdout, b"")


if __name__ == "__main__":
    unittest.main()
