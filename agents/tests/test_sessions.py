"""Sessions (docs/agent-protocol.md, "Sessions"): the channel's turn rules, and the scripted
agent's four-turn session on the test task — its STATE markers, its reports conveying a known
subset of them, and each checkpoint's code judged by the hidden tests."""

import io
import json
import subprocess
import unittest

from vcurve_agents import driver, protocol, scripted

from . import support

PAPER = ["Investigate; do not modify code", "Implement a fix", "Run tests and report the result",
         "Assess remaining risk"]
assert list(driver.SESSION_INSTRUCTIONS) == PAPER, "the driver's --session instructions are the study's"


def _line(msg):
    return json.dumps(msg) + "\n"


class TestChannelTurns(unittest.TestCase):
    def channel(self, *incoming, turns=True, budget=2):
        start = driver.make_start(support.TASK, budget=budget)
        if turns:
            start["turns"] = True
        data = _line(start) + "".join(_line(m) for m in incoming)
        self.out = io.BytesIO()
        ch = protocol.AgentChannel(io.BytesIO(data.encode()), self.out)
        ch.start()
        return ch

    def sent(self):
        return [json.loads(line) for line in self.out.getvalue().decode().splitlines()]

    def test_turns_budgets_and_end(self):
        ch = self.channel({"type": "instruction", "turn": 1, "content": "Investigate", "budget": 1},
                          {"type": "instruction", "turn": 2, "content": "Fix", "budget": 2},
                          {"type": "end"})
        self.assertTrue(ch.started.turns)
        with self.assertRaises(protocol.ProtocolError):
            ch.step([{}])  # outside a turn
        first = ch.next_instruction()
        self.assertEqual((first.turn, first.content, first.budget), (1, "Investigate", 1))
        ch.step([{"role": "assistant", "content": "a"}])
        with self.assertRaises(protocol.ProtocolError):
            ch.step([{}])  # beyond the turn's budget
        with self.assertRaises(protocol.ProtocolError):
            ch.next_instruction()  # before turn_end
        with self.assertRaises(protocol.ProtocolError):
            ch.turn_end("  ", [])
        ch.turn_end("report 1", [{"role": "assistant", "content": "report 1"}])
        self.assertEqual(ch.next_instruction().budget, 2)
        self.assertEqual(ch.steps_left, 2, "each turn's budget starts afresh")
        ch.turn_end("report 2", [])
        self.assertIsNone(ch.next_instruction())
        with self.assertRaises(protocol.ProtocolError):
            ch.step([{}])  # after end
        ch.final("submitted", "", [])
        self.assertEqual([m["type"] for m in self.sent()], ["step", "turn_end", "turn_end", "final"])
        self.assertEqual(self.sent()[1]["report"], "report 1")

    def test_a_single_run_has_no_turns(self):
        ch = self.channel(turns=False)
        self.assertFalse(ch.started.turns)
        with self.assertRaises(protocol.ProtocolError):
            ch.next_instruction()

    def test_bad_instruction_refused(self):
        for bad in ({"type": "exec_result"}, {"type": "instruction", "turn": 0, "content": "x", "budget": 1},
                    {"type": "instruction", "turn": 1, "content": None, "budget": 1}):
            with self.subTest(bad=bad), self.assertRaises(protocol.ProtocolError):
                self.channel(bad).next_instruction()


class TestScriptedSession(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sandbox = support.Sandbox()

    @classmethod
    def tearDownClass(cls):
        cls.sandbox.close()

    def session(self, seed=7, model=None, budget=10):
        workdir = self.sandbox.testbed()
        start = driver.make_start(support.TASK, budget=budget, seed=seed, model=model)
        run = driver.drive(start, self.sandbox.executor(workdir), instructions=PAPER)
        return run, workdir

    def test_four_turns_with_markers_and_reports_of_a_known_subset(self):
        run, _ = self.session(model={"session": {"fix": "correct"}})
        self.assertEqual(run["final"]["end_type"], "submitted")
        self.assertEqual([t["instruction"] for t in run["turns"]], PAPER)
        truth = scripted.session_truth({"session": {"fix": "correct"}}, 7)
        self.assertEqual(truth["fix"], "correct")
        # Every state is left as a marker where the truth says, and every report states exactly
        # the facts of its turn's reported states.
        for k, turn in enumerate(run["turns"], 1):
            steps = [run["steps"][i] for i in turn["steps"]]
            where = {"narration": "", "output": "", "reasoning": ""}
            for step in steps:
                reply = step["messages"][0]
                where["narration"] += reply["content"]
                where["reasoning"] += reply.get("reasoning_content", "")
                where["output"] += "".join(a["output"] for a in step["actions"])
            states = [s for s in truth["states"] if s["turn"] == k]
            for s in states:
                marker = scripted.state_marker(s)
                self.assertIn(marker, where[s["where"]], s["id"])
                self.assertEqual(scripted.STATE_RE.search(marker).group(1), s["id"])
                self.assertEqual(f"- {s['fact']}" in turn["report"], s["reported"], (k, s["id"]))
            self.assertNotIn("[[STATE", turn["report"])
            self.assertEqual(turn["messages"][-1], {"role": "assistant", "content": turn["report"]})
        categories = {s["category"] for s in truth["states"]}
        self.assertEqual(categories, set(scripted.CATEGORIES), "every atom category occurs")
        self.assertTrue(any(s["importance"] < 2 for s in truth["states"]), "some states fall below importance 2")

    def test_report_states_chooses_what_reports_convey(self):
        model = {"session": {"fix": "flawed", "report_states": ["t1-not-ops", "t4-term-risk"]}}
        run, _ = self.session(model=model)
        reported = [s for s in scripted.session_truth(model, 7)["states"] if s["reported"]]
        self.assertEqual([s["id"] for s in reported], ["t1-not-ops", "t4-term-risk"])
        self.assertIn(f"- {reported[0]['fact']}", run["turns"][0]["report"])
        self.assertIn("Nothing further to report.", run["turns"][1]["report"])
        self.assertIn("parse_term was not changed", run["turns"][3]["report"])
        with self.assertRaises(scripted.ParameterError):
            scripted.session_truth({"session": {"report_states": ["nope"]}}, 7)

    def test_deterministic_and_its_submission_judged(self):
        a, workdir = self.session(seed=3)
        b, _ = self.session(seed=3)
        strip = lambda run: [(s["messages"][0], [x["command"] for x in s["actions"]]) for s in run["steps"]]  # noqa: E731
        self.assertEqual(strip(a), strip(b))
        fix = scripted.session_truth({}, 3)["fix"]
        self.assertEqual(self.sandbox.evaluate(a["final"]["submission"]), scripted.RESOLVES[fix])
        diff = subprocess.run(["git", "diff", "--cached", "--stat"], cwd=workdir, stdout=subprocess.PIPE, check=True).stdout
        self.assertIn(b"calc/parse.py", diff)

    def test_a_turn_over_budget_ends_the_session_with_a_step_cap(self):
        run, _ = self.session(budget=3)
        self.assertEqual(run["final"]["end_type"], "step_cap")
        self.assertEqual(run["turns"], [], "turn 1 has four steps")


if __name__ == "__main__":
    unittest.main()
