"""The scripted agent: its fixes judged by the hidden tests, determinism, resumption, the step cap,
the random-token variant, and its known curve (truth and a Monte Carlo check of V(h_0) = q·r)."""

import math
import re
import subprocess
import unittest

from vcurve_agents import driver, scripted

from . import support

D, F, T = 8, 10, 13  # the defaults


def seed_with(hypothesis=None, fix=None, params=None, start=0):
    """The first seed >= start whose draws give this hypothesis and fix."""
    params = params or scripted.Params()
    for seed in range(start, start + 10_000):
        h = scripted.draw_hypothesis(params, seed)
        f = scripted.draw_fix(params, seed, h)
        if (hypothesis is None or h == hypothesis) and (fix is None or f == fix):
            return seed
    raise AssertionError("no such seed")


class SandboxCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sandbox = support.Sandbox()

    @classmethod
    def tearDownClass(cls):
        cls.sandbox.close()


class TestTask(SandboxCase):
    """The task's hidden tests tell the right fix from the two wrong ones."""

    def patch_of(self, fix):
        workdir = self.sandbox.testbed()
        ex = self.sandbox.executor(workdir)
        edit = ex.run(scripted.FIXES[fix][1], 60)
        self.assertEqual(edit["returncode"], 0, edit["output"])
        visible = ex.run(scripted.VISIBLE_TESTS, 60)
        self.assertEqual(visible["returncode"], 0, f"{fix}: the visible tests fail:\n{visible['output']}")
        return subprocess.run(["git", "diff"], cwd=workdir, stdout=subprocess.PIPE, check=True).stdout.decode()

    def test_buggy_code_fails_the_hidden_tests_and_passes_the_visible(self):
        self.assertFalse(self.sandbox.evaluate(""))
        workdir = self.sandbox.testbed()
        self.assertEqual(self.sandbox.executor(workdir).run(scripted.VISIBLE_TESTS, 60)["returncode"], 0)
        # An empty patch is never evaluated; judge the unchanged code by a patch that changes nothing
        # the tests see.
        noop = self.patch_of_readme()
        self.assertFalse(self.sandbox.evaluate(noop))

    def patch_of_readme(self):
        workdir = self.sandbox.testbed()
        with open(f"{workdir}/README.md", "a") as f:
            f.write("Chains of operators: see the tests.\n")
        return subprocess.run(["git", "diff"], cwd=workdir, stdout=subprocess.PIPE, check=True).stdout.decode()

    def test_fixes(self):
        for fix, resolves in scripted.RESOLVES.items():
            with self.subTest(fix=fix):
                patch = self.patch_of(fix)
                self.assertTrue(patch)
                self.assertEqual(self.sandbox.evaluate(patch), resolves)
        self.assertEqual(scripted.RESOLVES, {"correct": True, "flawed": False, "wrong": False})

    def test_fixes_touch_the_expected_files(self):
        self.assertIn("calc/parse.py", self.patch_of("correct"))
        self.assertIn("calc/parse.py", self.patch_of("flawed"))
        self.assertIn("calc/ops.py", self.patch_of("wrong"))


class TestRuns(SandboxCase):
    def test_deterministic(self):
        seed = 5
        a, b = self.sandbox.run(seed), self.sandbox.run(seed)
        self.assertEqual(support.assistant_contents(a["final"]["messages"]),
                         support.assistant_contents(b["final"]["messages"]))
        self.assertEqual(a["final"]["submission"], b["final"]["submission"])
        self.assertEqual([s["actions"][0]["command"] for s in a["steps"]],
                         [s["actions"][0]["command"] for s in b["steps"]])
        # The observations differ only where the plan says (timestamps, durations, the shuffled
        # listing), and not at all after normalization.
        for sa, sb in zip(a["steps"], b["steps"]):
            self.assertEqual(support.normalize(sa["messages"][1]["content"]),
                             support.normalize(sb["messages"][1]["content"]))
        self.assertEqual(a["final"]["messages"][:2], b["final"]["messages"][:2])

    def test_submission_matches_the_drawn_fix_and_truth(self):
        for fix in ("correct", "flawed", "wrong"):
            with self.subTest(fix=fix):
                seed = seed_with(fix=fix)
                run = self.sandbox.run(seed)
                messages = run["final"]["messages"]
                self.assertEqual(scripted.State(messages).fix, fix)
                resolved = self.sandbox.evaluate(run["final"]["submission"])
                self.assertEqual(resolved, scripted.RESOLVES[fix])
                self.assertEqual(scripted.truth({}, messages)["value"], float(resolved))

    def test_markers_at_the_decision_and_fix_steps(self):
        run = self.sandbox.run(seed_with(hypothesis="right"))
        contents = support.assistant_contents(run["final"]["messages"])
        with_h = [i + 1 for i, c in enumerate(contents) if scripted.HYPOTHESIS_RE.search(c)]
        with_f = [i + 1 for i, c in enumerate(contents) if scripted.FIX_RE.search(c)]
        self.assertEqual((with_h, with_f), ([D], [F]))
        # Step D is a harmless read; the first edit is at F.
        self.assertEqual(run["steps"][D - 1]["actions"][0]["command"], "cat calc/evaluate.py")
        self.assertIn("calc/parse.py", run["steps"][F - 1]["actions"][0]["command"])

    def test_plan_with_defaults(self):
        run = self.sandbox.run(seed=1)
        commands = [s["actions"][0]["command"] for s in run["steps"]]
        self.assertEqual(commands[1], "ls calc | shuf")
        self.assertTrue(commands[4].startswith("date -u"))
        self.assertRegex(run["steps"][4]["actions"][0]["output"], r"^started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n")
        self.assertRegex(run["steps"][6]["actions"][0]["output"], r"took \d+\.\d{4}s\n")
        self.assertRegex(run["steps"][2]["actions"][0]["output"], r"Ran 7 tests in \d+\.\d+s")
        listing = run["steps"][1]["actions"][0]["output"].splitlines()
        self.assertEqual(sorted(listing), ["__init__.py", "evaluate.py", "format.py", "ops.py", "parse.py", "tokenize.py"])
        self.assertEqual(commands[-1], scripted.SUBMIT_COMMAND)


class TestResumption(SandboxCase):
    """A continuation from h_t is the same run resumed: past D it keeps the prefix's decisions."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.seed = seed_with(hypothesis="right", fix="correct")
        cls.base = cls.sandbox.run(cls.seed)

    def rest(self, run, t):
        """The assistant messages and the submission from step t+1 on."""
        return support.assistant_contents(run["final"]["messages"])[t:], run["final"]["submission"]

    def test_same_seed_reproduces_the_rest(self):
        for t in (0, D - 1, D, F, T - 1):
            with self.subTest(t=t):
                resumed = self.sandbox.resume(self.base, t, self.seed)
                self.assertEqual(resumed["start"]["t"], t)
                self.assertEqual(len(resumed["steps"]), T - t)
                self.assertEqual(resumed["final"]["end_type"], "submitted")
                self.assertEqual(self.rest(resumed, t), self.rest(self.base, t))
                self.assertEqual(resumed["final"]["messages"][:2 + 2 * t], driver.prefix_at(self.base, t))

    def test_past_the_decision_step_the_prefix_decides(self):
        # A seed that would draw the wrong hypothesis from h_0 keeps the prefix's right one.
        other = seed_with(hypothesis="wrong", start=1000)
        for t in (D, F - 1):
            with self.subTest(t=t):
                resumed = self.sandbox.resume(self.base, t, other)
                self.assertEqual(scripted.State(resumed["final"]["messages"]).hypothesis, "right")
        # Past the fix step even the outcome is the prefix's.
        resumed = self.sandbox.resume(self.base, F, other)
        self.assertEqual(resumed["final"]["submission"], self.base["final"]["submission"])

    def test_between_decision_and_fix_the_fix_is_drawn_afresh(self):
        flawed = seed_with(fix="flawed", start=2000)
        resumed = self.sandbox.resume(self.base, D, flawed)
        self.assertEqual(scripted.State(resumed["final"]["messages"]).fix, "flawed")
        self.assertFalse(self.sandbox.evaluate(resumed["final"]["submission"]))

    def test_before_the_decision_step_the_hypothesis_is_drawn_afresh(self):
        other = seed_with(hypothesis="wrong", start=3000)
        resumed = self.sandbox.resume(self.base, D - 1, other)
        state = scripted.State(resumed["final"]["messages"])
        self.assertEqual((state.hypothesis, state.fix), ("wrong", "wrong"))
        self.assertFalse(self.sandbox.evaluate(resumed["final"]["submission"]))

    def test_state_counts_steps_from_messages(self):
        for t in range(T + 1):
            self.assertEqual(scripted.State(driver.prefix_at(self.base, t)).steps, t)


class TestStepCap(SandboxCase):
    def test_budget_runs_out(self):
        run = self.sandbox.run(seed=2, budget=5)
        self.assertEqual(len(run["steps"]), 5)
        self.assertEqual(run["final"]["end_type"], "step_cap")
        self.assertEqual(run["final"]["submission"], "")
        self.assertEqual(len(run["final"]["messages"]), 2 + 2 * 5)

    def test_exact_budget_submits(self):
        seed = seed_with(fix="correct")
        base = self.sandbox.run(seed, budget=T)
        self.assertEqual(base["final"]["end_type"], "submitted")
        # A continuation from h_t has budget B - t: one step short of T - t step-caps after the fix.
        resumed = self.sandbox.resume(base, F, seed, budget=T - F - 1)
        self.assertEqual(resumed["final"]["end_type"], "step_cap")
        self.assertEqual(len(resumed["steps"]), T - F - 1)
        self.assertEqual(scripted.truth({}, driver.prefix_at(base, F), budget=T - F - 1)["value"], 0.0)
        self.assertEqual(scripted.truth({}, driver.prefix_at(base, F), budget=T - F)["value"], 1.0)

    def test_zero_budget(self):
        run = self.sandbox.run(seed=2, budget=0)
        self.assertEqual((run["steps"], run["final"]["end_type"]), ([], "step_cap"))


class TestRandomToken(SandboxCase):
    def test_token_step_is_not_replayable(self):
        k = 4
        model = {"random_token_step": k}
        a, b = self.sandbox.run(3, model), self.sandbox.run(3, model)
        out_a = a["steps"][k - 1]["actions"][0]["output"]
        out_b = b["steps"][k - 1]["actions"][0]["output"]
        token_a, token_b = out_a.splitlines()[-1], out_b.splitlines()[-1]
        self.assertRegex(token_a, r"^[A-Za-z]{24}$")
        self.assertRegex(token_b, r"^[A-Za-z]{24}$")
        self.assertNotEqual(token_a, token_b)
        # No level of the comparison accepts it: not exact, not the same lines in another order,
        # not the same characters in another order.
        self.assertNotEqual(support.normalize(out_a), support.normalize(out_b))
        self.assertNotEqual(sorted(out_a), sorted(out_b))
        # Everything else matches as in the plain run, and the outcome is unaffected.
        for i, (sa, sb) in enumerate(zip(a["steps"], b["steps"])):
            if i != k - 1:
                self.assertEqual(support.normalize(sa["messages"][1]["content"]),
                                 support.normalize(sb["messages"][1]["content"]))
        self.assertEqual(a["final"]["submission"], b["final"]["submission"])
        self.assertEqual(a["final"]["submission"], self.sandbox.run(3)["final"]["submission"])

    def test_token_step_must_precede_the_submission(self):
        with self.assertRaises(scripted.ParameterError):
            scripted.Params({"random_token_step": T})
        self.assertEqual(scripted.Params({"random_token_step": T - 1}).random_token_step, T - 1)


class TestParams(unittest.TestCase):
    def test_defaults(self):
        p = scripted.Params({"temperature": 0.7, "top_p": 0.8})
        self.assertEqual((p.q, p.r, p.decision_step, p.fix_step, p.length, p.random_token_step, p.timeout_s),
                         (0.7, 0.9, 8, 10, 13, None, 60))

    def test_fix_step_follows_decision_step(self):
        self.assertEqual(scripted.Params({"decision_step": 3}).fix_step, 5)
        self.assertEqual(scripted.Params({"decision_step": 3, "fix_step": 4}).length, 7)

    def test_invalid(self):
        for model in ({"q": -0.1}, {"r": "0.9"}, {"decision_step": 0}, {"decision_step": 2.0},
                      {"decision_step": 5, "fix_step": 5}, {"timeout_s": 0}, {"q": True}):
            with self.subTest(model=model), self.assertRaises(scripted.ParameterError):
                scripted.Params(model)


class TestKnownCurve(unittest.TestCase):
    """truth() against the formula, and Monte Carlo from h_0 against q·r (in process: the agent's
    decisions do not depend on command outputs, and which fix resolves is TestTask's business)."""

    def test_truth_along_runs(self):
        for model in ({}, {"q": 0.4, "r": 0.5, "decision_step": 3, "fix_step": 6}):
            p = scripted.Params(model)
            for seed in range(40):
                ch = support.run_in_process(seed, model)
                messages = ch.final_message["messages"]
                state = scripted.State(messages)
                for t in range(p.length + 1):
                    prefix = messages[:2 + 2 * t]
                    got = scripted.truth(model, prefix)
                    if t < p.decision_step:
                        want = p.q * p.r
                    elif t < p.fix_step:
                        want = p.r if state.hypothesis == "right" else 0.0
                    else:
                        want = 1.0 if state.fix == "correct" else 0.0
                    self.assertEqual(got["value"], want, (model, seed, t))
                    self.assertEqual(got["t"], t)
                    self.assertEqual(got["wrong_hypothesis"], t >= p.decision_step and state.hypothesis == "wrong")

    def success_rate(self, model, messages=(), seeds=range(200)):
        wins = 0
        for seed in seeds:
            ch = support.run_in_process(seed, model, messages)
            self.assertEqual(ch.final_message["end_type"], "submitted")
            wins += scripted.RESOLVES[scripted.State(ch.final_message["messages"]).fix]
        return wins / len(seeds)

    def assert_within(self, rate, p, n, z=4.0):
        se = math.sqrt(p * (1 - p) / n)
        self.assertLessEqual(abs(rate - p), z * se, f"success rate {rate} vs {p} (se {se:.3f})")

    def test_monte_carlo_from_h0(self):
        for model in ({}, {"q": 0.5, "r": 0.6}):
            p = scripted.Params(model)
            with self.subTest(model=model):
                self.assert_within(self.success_rate(model), p.q * p.r, 200)

    def test_monte_carlo_after_the_right_hypothesis(self):
        # Continuations from h_D of a run that adopted the right hypothesis succeed at rate r.
        seed = seed_with(hypothesis="right")
        base = support.run_in_process(seed).final_message["messages"]
        prefix = base[:2 + 2 * D]
        self.assert_within(self.success_rate({}, prefix, range(10_000, 10_200)), 0.9, 200)
        wrong = support.run_in_process(seed_with(hypothesis="wrong")).final_message["messages"][:2 + 2 * D]
        self.assertEqual(self.success_rate({}, wrong, range(50)), 0.0)


if __name__ == "__main__":
    unittest.main()
