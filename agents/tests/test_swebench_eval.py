"""The SWE-bench evaluator (vcurve_agents.swebench_eval) running the real harness, swebench==5.0.2.

The instance is the test task calc-1 as a SWE-bench row (fixtures/swebench/calc-1.json: the v5
fields image, eval_script, log_parser, eval_type, FAIL_TO_PASS, PASS_TO_PASS; the eval script runs
the hidden tests with unittest, graded by the harness's parse_log_django), its image the local task
image (VCURVE_TEST_TASK_IMAGE) tagged under the harness's naming rule
(swebench/sweb.eval.x86_64.vcurve_1776_calc-1, `__` -> `_1776_`) with a tag of this test run. The
patches are the scripted agent's correct and flawed fixes (fixtures/swebench/calc-1-*.diff, checked
against scripted.FIXES here).

Needs the virtual environment scripts/swebench-venv makes (VCURVE_SWEBENCH_PYTHON, else
.venv/swebench/bin/python), a running Docker Engine and VCURVE_TEST_TASK_IMAGE (deploy/images/build
prints it); without them the tests that need them are skipped, saying which is missing (they fail under
VCURVE_TEST_REQUIRE=all, as in scripts/test).
scripts/test provides all three.
"""

import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import uuid

from vcurve_agents import scripted, swebench_eval

from . import require, support

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "swebench")
VENV_PYTHON = os.path.join(support.REPO, ".venv", "swebench", "bin", "python")
AGENTS = os.path.join(support.REPO, "agents")
HARNESS_IMAGE = "swebench/sweb.eval.x86_64.vcurve_1776_calc-1"


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


ROW = json.loads(fixture("calc-1.json"))
CORRECT = fixture("calc-1-correct.diff")
FLAWED = fixture("calc-1-flawed.diff")
FOREIGN = ("diff --git a/calc/nothing.py b/calc/nothing.py\n--- a/calc/nothing.py\n+++ b/calc/nothing.py\n"
           "@@ -1,2 +1,2 @@\n-this line\n+that line\n is not there\n")


def swebench_python():
    return require.detect(require.SWEBENCH)


def needs_harness(test):
    return require.needs(require.SWEBENCH)(test)


def run_eval(request, log_dir=None):
    """Run the evaluator as the worker does: its own python, PYTHONPATH at agents/, a JSON request on
    stdin; the JSON line it prints."""
    own = log_dir is None
    log_dir = log_dir or tempfile.mkdtemp(prefix="vcurve-swebench-test-")
    try:
        env = {**os.environ, "PYTHONPATH": AGENTS}
        done = subprocess.run([swebench_python(), "-m", "vcurve_agents.swebench_eval"],
                              input=json.dumps({"log_dir": log_dir, **request}), capture_output=True,
                              text=True, env=env, timeout=600, cwd=log_dir)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or len(lines) != 1:
            raise AssertionError(f"swebench_eval exited {done.returncode} printing {done.stdout!r}; "
                                 f"stderr:\n{done.stderr[-4000:]}")
        result = json.loads(lines[0])
        result["_stderr"] = done.stderr
        return result
    finally:
        if own:
            shutil.rmtree(log_dir, ignore_errors=True)


def containers_named(name):
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", f"name={name}"],
                         capture_output=True, text=True, check=True).stdout
    return [n for n in out.split() if n == name or n.startswith(name + ".")]


def new_run_id(patch):
    """A run id as the worker makes them: the patch digest and a random part."""
    return f"vcurve-{hashlib.sha256(patch.encode()).hexdigest()[:16]}-{uuid.uuid4().hex[:8]}"


class TheFixtures(unittest.TestCase):
    def test_the_patches_are_the_scripted_agents_correct_and_flawed_fixes(self):
        sandbox = support.Sandbox()
        try:
            for name, patch in (("correct", CORRECT), ("flawed", FLAWED)):
                testbed = sandbox.testbed()
                subprocess.run(["bash", "-c", scripted.FIXES[name][1]], cwd=testbed, env=sandbox.env, check=True,
                               capture_output=True)
                diff = subprocess.run(["git", "diff"], cwd=testbed, capture_output=True, text=True, check=True)
                self.assertEqual(diff.stdout, patch, name)
        finally:
            sandbox.close()
        self.assertEqual(ROW["patch"], CORRECT, "the row's gold patch is the correct fix")
        self.assertTrue(scripted.RESOLVES["correct"] and not scripted.RESOLVES["flawed"])

    def test_the_container_name_is_the_harness_rule(self):
        self.assertEqual(swebench_eval.container_name("Django__django-1", "vcurve-ab-cd"),
                         "sweb.eval.django__django-1.vcurve-ab-cd")


class TheReportEntry(unittest.TestCase):
    """A report entry's verdict, as the harness's run report counts it (no harness needed)."""

    def test_an_infra_failure_flag_keeps_the_harness_verdict_and_is_counted(self):
        entry = {"resolved": False, "patch_successfully_applied": True, "infra_failure": True,
                 "infra_failure_reason": "Killed (out of memory)", "tests_status": {}}
        result = swebench_eval.graded(entry, "i", "report.json")
        self.assertEqual((result["outcome"], result["infra_failure"]), ("unresolved", "Killed (out of memory)"))
        self.assertIn("infrastructure failure: Killed", result["detail"])
        # Without the flag, no `infra_failure` key; a missing entry is the harness's failure.
        plain = swebench_eval.graded({"resolved": True}, "i", "report.json")
        self.assertEqual(plain["outcome"], "resolved")
        self.assertNotIn("infra_failure", plain)
        self.assertEqual(swebench_eval.graded({**entry, "infra_failure_reason": None}, "i", "r")["infra_failure"],
                         "no reason given")
        with self.assertRaises(swebench_eval.Infrastructure):
            swebench_eval.graded(None, "i", "report.json")


@needs_harness
class TheRequest(unittest.TestCase):
    """What is refused before any container: a row without the v5 fields, a bad request."""

    def test_a_row_without_the_v5_fields_is_an_invalid_instance(self):
        row = {k: v for k, v in ROW.items() if k not in ("eval_script", "log_parser")}
        result = run_eval({"instance": row, "patch": CORRECT, "run_id": "vcurve-x"})
        self.assertEqual(result["outcome"], "invalid_instance", result)
        self.assertIn("lacks log_parser, eval_script", result["reason"])
        self.assertIn("swebench 5.0.2", result["reason"])

    def test_an_unknown_log_parser_or_eval_type_is_an_invalid_instance(self):
        for key, value, said in (("log_parser", "parse_log_nothing", "log parser 'parse_log_nothing'"),
                                 ("eval_type", "sometimes", "eval_type 'sometimes'")):
            result = run_eval({"instance": {**ROW, key: value}, "patch": CORRECT, "run_id": "vcurve-x"})
            self.assertEqual(result["outcome"], "invalid_instance", result)
            self.assertIn(said, result["reason"])

    def test_a_request_without_a_row_or_with_garbage_is_refused(self):
        result = run_eval({"patch": CORRECT, "run_id": "vcurve-x"})
        self.assertEqual(result["outcome"], "invalid_instance", result)
        self.assertIn("no `instance` object", result["reason"])


@needs_harness
class TheHarness(unittest.TestCase):
    """The real harness in real containers of the local task image."""

    @classmethod
    def setUpClass(cls):
        _, image = require.require(require.DOCKER, require.TASK_IMAGE)
        cls.image = f"{HARNESS_IMAGE}:test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        subprocess.run(["docker", "tag", image, cls.image], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        # Only the tag: the task image keeps its own.
        subprocess.run(["docker", "rmi", cls.image], capture_output=True)

    def evaluate(self, patch, **overrides):
        run_id = new_run_id(patch)
        row = {**ROW, "image": self.image}
        log_dir = tempfile.mkdtemp(prefix="vcurve-swebench-test-")
        try:
            result = run_eval({"instance": row, "patch": patch, "run_id": run_id, "timeout_s": 300, **overrides},
                              log_dir=log_dir)
            report = os.path.join(log_dir, "logs", "run_evaluation", run_id, "vcurve", ROW["instance_id"],
                                  "report.json")
            result["_report"] = None
            if os.path.exists(report):
                with open(report) as f:
                    result["_report"] = json.load(f)
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        self.assertEqual(result.get("run_id"), run_id, result)
        name = f"sweb.eval.vcurve__calc-1.{run_id}"
        self.assertEqual(result["container"], name)
        self.assertEqual(containers_named(name), [], "the harness's container is removed")
        return result

    def test_the_correct_and_the_flawed_fix_evaluated_concurrently(self):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            correct, flawed = pool.map(self.evaluate, [CORRECT, FLAWED])

        self.assertEqual(correct["outcome"], "resolved", correct)
        self.assertEqual((correct["patch_applied"], correct["apply_command"], correct["timed_out"]),
                         (True, "git apply --verbose", False))
        self.assertEqual(correct["test_exit_code"], 0)
        self.assertEqual(correct["tests_status"]["FAIL_TO_PASS"]["failure"], [])
        self.assertEqual(correct["_report"]["vcurve__calc-1"]["resolved"], True, "the harness's own report.json")
        self.assertIn("Ran 7 tests", correct["output_tail"])

        self.assertEqual(flawed["outcome"], "unresolved", flawed)
        self.assertEqual((flawed["patch_applied"], flawed["apply_command"]), (True, "git apply --verbose"))
        self.assertEqual(flawed["test_exit_code"], 1)
        self.assertEqual(flawed["tests_status"]["FAIL_TO_PASS"]["failure"],
                         ["test_division_chains (test_hidden_calc.TestLeftToRight.test_division_chains)"])
        self.assertEqual(flawed["tests_status"]["PASS_TO_PASS"]["failure"], [])
        self.assertEqual(flawed["_report"]["vcurve__calc-1"]["resolved"], False)
        self.assertNotEqual(correct["run_id"], flawed["run_id"])

    def test_a_patch_the_harness_cannot_apply_is_unresolved_not_an_infrastructure_failure(self):
        result = self.evaluate(FOREIGN)
        self.assertEqual((result["outcome"], result["patch_applied"]), ("unresolved", False), result)
        self.assertIn("Patch Apply Failed", result["detail"])
        self.assertIsNone(result["_report"], "the harness writes no report for it")

    def test_an_image_that_is_missing_is_an_infrastructure_failure(self):
        missing = f"{HARNESS_IMAGE}:missing-{uuid.uuid4().hex[:8]}"
        result = run_eval({"instance": {**ROW, "image": missing}, "patch": CORRECT,
                           "run_id": new_run_id(CORRECT)})
        self.assertEqual(result["outcome"], "infrastructure", result)
        self.assertIn(f"the image {missing} of vcurve__calc-1 is not on this Docker Engine", result["reason"])


if __name__ == "__main__":
    unittest.main()
