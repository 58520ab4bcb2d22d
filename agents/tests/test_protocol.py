"""The agent process protocol: the scripted agent's conformance, and the channel's own checks."""

import io
import json
import os
import subprocess
import sys
import unittest

from vcurve_agents import driver, protocol, scripted

from . import support


class TestConformance(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sandbox = support.Sandbox()
        cls.run_ = cls.sandbox.run(seed=11)

    @classmethod
    def tearDownClass(cls):
        cls.sandbox.close()

    def test_message_order(self):
        # start, then per step one exec answered by one exec_result and then the step, then final.
        T = scripted.Params().length
        self.assertEqual(self.run_["transcript"], ["start"] + ["exec", "exec_result", "step"] * T + ["final"])

    def test_steps_and_final(self):
        run = self.run_
        T = scripted.Params().length
        self.assertEqual(T, 13)
        self.assertEqual(len(run["steps"]), T)
        final = run["final"]
        self.assertEqual(final["end_type"], "submitted")
        self.assertTrue(final["submission"].startswith("diff --git a/calc/"), final["submission"])
        # An empty prefix: the agent's own system and task messages, then two messages per step.
        messages = final["messages"]
        self.assertEqual([m["role"] for m in messages[:2]], ["system", "user"])
        self.assertIn(support.TASK["problem_statement"], messages[1]["content"])
        self.assertEqual(len(messages), 2 + 2 * T)
        for i, step in enumerate(run["steps"]):
            self.assertEqual([m["role"] for m in step["messages"]], ["assistant", "user"])
            self.assertEqual(len(step["actions"]), 1)
            content = step["messages"][0]["content"]
            self.assertTrue(content.startswith("THOUGHT: "), content)
            self.assertEqual(content.count("```bash\n"), 1)
            command = content.split("```bash\n", 1)[1].rsplit("\n```", 1)[0]
            self.assertEqual(command, step["actions"][0]["command"])
            self.assertEqual(step["actions"][0]["timeout_s"], 60)
            action = step["actions"][0]
            self.assertEqual(step["messages"][1]["content"],
                             f"<returncode>{action['returncode']}</returncode>\n<output>\n{action['output']}</output>")
            self.assertEqual(messages[2 + 2 * i:4 + 2 * i], step["messages"])

    def test_every_command_succeeds(self):
        for step in self.run_["steps"]:
            self.assertEqual(step["actions"][0]["returncode"], 0, step["actions"][0])

    def test_submission_is_the_diff(self):
        last = self.run_["steps"][-1]["actions"][0]
        self.assertEqual(last["command"], scripted.SUBMIT_COMMAND)
        self.assertEqual(last["output"], scripted.SUBMIT_MARKER + "\n" + self.run_["final"]["submission"])


def _run_raw(lines, model=None):
    """Feed the agent process raw lines; return (exit status, stdout messages, stderr)."""
    env = {**os.environ, "PYTHONPATH": driver.AGENTS_DIR}
    proc = subprocess.run([sys.executable, "-m", "vcurve_agents.scripted"], input="".join(lines).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=30)
    out = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    return proc.returncode, out, proc.stderr.decode()


def _start(**kw):
    return json.dumps(driver.make_start(support.TASK, **kw)) + "\n"


class TestBrokenRuns(unittest.TestCase):
    """What breaks the protocol ends the process non-zero without a final: a run with no outcome."""

    def test_wrong_protocol_version(self):
        start = json.loads(_start())
        start["protocol"] = "vcurve.agent.v0"
        rc, out, err = _run_raw([json.dumps(start) + "\n"])
        self.assertNotEqual(rc, 0)
        self.assertEqual(out, [])
        self.assertIn("vcurve.agent.v1", err)

    def test_invalid_parameter(self):
        rc, out, err = _run_raw([_start(model={"q": 1.5})])
        self.assertEqual(rc, 2)
        self.assertEqual(out, [])
        self.assertIn("model.q", err)

    def test_unexpected_message_instead_of_exec_result(self):
        rc, out, err = _run_raw([_start(), json.dumps({"type": "step", "messages": []}) + "\n"])
        self.assertNotEqual(rc, 0)
        self.assertEqual([m["type"] for m in out], ["exec"])
        self.assertIn("exec_result", err)

    def test_stdin_closed_mid_run(self):
        rc, out, err = _run_raw([_start()])
        self.assertNotEqual(rc, 0)
        self.assertEqual([m["type"] for m in out], ["exec"])
        self.assertNotIn("final", [m["type"] for m in out])

    def test_not_json(self):
        rc, out, err = _run_raw(["{not json\n"])
        self.assertNotEqual(rc, 0)
        self.assertEqual(out, [])


class TestAgentChannel(unittest.TestCase):
    def channel(self, *incoming, budget=2):
        data = _start(budget=budget) + "".join(json.dumps(m) + "\n" for m in incoming)
        self.out = io.BytesIO()
        ch = protocol.AgentChannel(io.BytesIO(data.encode()), self.out)
        ch.start()
        return ch

    def sent(self):
        return [json.loads(line) for line in self.out.getvalue().decode().splitlines()]

    def test_exec_round_trip(self):
        ch = self.channel({"type": "exec_result", "output": "hi\n", "returncode": 0, "timed_out": False,
                           "exception": None})
        r = ch.exec("echo hi", 5)
        self.assertEqual((r.output, r.returncode, r.timed_out, r.exception), ("hi\n", 0, False, None))
        self.assertEqual(self.sent(), [{"type": "exec", "command": "echo hi", "timeout_s": 5}])

    def test_no_step_beyond_budget(self):
        ch = self.channel(budget=1)
        ch.step([])
        with self.assertRaises(protocol.ProtocolError):
            ch.step([])

    def test_nothing_after_final(self):
        ch = self.channel()
        ch.final("step_cap", "", [])
        with self.assertRaises(protocol.ProtocolError):
            ch.final("submitted", "", [])
        with self.assertRaises(protocol.ProtocolError):
            ch.exec("true", 1)

    def test_unknown_end_type_refused(self):
        with self.assertRaises(protocol.ProtocolError):
            self.channel().final("gave_up", None, [])

    def test_bad_exec_result_refused(self):
        ch = self.channel({"type": "exec_result", "output": 3, "returncode": 0})
        with self.assertRaises(protocol.ProtocolError):
            ch.exec("true", 1)

    def test_timed_out_result(self):
        ch = self.channel({"type": "exec_result", "output": "", "returncode": None, "timed_out": True,
                           "exception": None})
        self.assertTrue(ch.exec("sleep 9", 1).timed_out)


if __name__ == "__main__":
    unittest.main()
