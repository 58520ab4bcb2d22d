"""The gate itself (agents/tests/require.py), on made-up environments."""

import os
import unittest
from unittest import mock

from . import require


class TheGate(unittest.TestCase):
    def env(self, **vars):
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("VCURVE_", "DOCKER_HOST"))}
        return mock.patch.dict(os.environ, {**clean, **vars}, clear=True)

    def test_a_present_service_gives_its_value(self):
        with self.env(VCURVE_TEST_TASK_IMAGE="task:1"):
            self.assertEqual(require.require(require.TASK_IMAGE), ["task:1"])

    def test_a_missing_service_skips_with_one_line(self):
        with self.env(VCURVE_TEST_TASK_IMAGE=" "):
            with self.assertRaises(unittest.SkipTest) as caught:
                require.require(require.TASK_IMAGE)
        line = str(caught.exception)
        self.assertNotIn("\n", line)
        self.assertTrue(line.startswith("needs the test task image (set VCURVE_TEST_TASK_IMAGE"), line)
        self.assertTrue(line.endswith("or run scripts/test"), line)

    def test_require_all_fails_instead(self):
        with self.env(VCURVE_TEST_REQUIRE="all"):
            with self.assertRaises(AssertionError) as caught:
                require.require(require.TASK_IMAGE)
        self.assertIn("VCURVE_TEST_REQUIRE requires it", str(caught.exception))

    def test_skip_leaves_a_present_service_out_even_when_required(self):
        with self.env(VCURVE_TEST_TASK_IMAGE="task:1", VCURVE_TEST_SKIP="all", VCURVE_TEST_REQUIRE="all"):
            with self.assertRaises(unittest.SkipTest) as caught:
                require.require(require.TASK_IMAGE)
        self.assertIn("VCURVE_TEST_SKIP leaves it out", str(caught.exception))

    def test_docker_only_on_a_local_socket(self):
        with self.env(DOCKER_HOST="tcp://10.0.0.1:2375"):
            self.assertIsNone(require.detect(require.DOCKER))

    def test_needs_skips_a_class_in_its_set_up(self):
        @require.needs(require.TASK_IMAGE)
        class Gated(unittest.TestCase):
            def test_nothing(self):
                pass

        with self.env():
            result = unittest.TestResult()
            unittest.defaultTestLoader.loadTestsFromTestCase(Gated).run(result)
        self.assertEqual((len(result.skipped), result.errors, result.failures), (1, [], []))


if __name__ == "__main__":
    unittest.main()
