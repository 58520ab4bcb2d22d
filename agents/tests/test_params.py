"""Per-task overrides of the scripted agent's parameters."""

import unittest

from vcurve_agents.scripted import ParameterError, Params, model_for


class ModelForTest(unittest.TestCase):
    def test_a_tasks_overrides_are_laid_over_the_rest(self):
        model = {"q": 0.5, "tasks": {"calc-token": {"random_token_step": 4}}}
        self.assertEqual(model_for(model, "calc-token"), {"q": 0.5, "random_token_step": 4})
        self.assertEqual(model_for(model, "calc-1"), {"q": 0.5})
        self.assertEqual(Params(model_for(model, "calc-token")).random_token_step, 4)
        self.assertIsNone(Params(model_for(model, "calc-1")).random_token_step)

    def test_bad_overrides_are_named(self):
        with self.assertRaisesRegex(ParameterError, "model.tasks"):
            model_for({"tasks": [1]}, "x")
        with self.assertRaisesRegex(ParameterError, "model.tasks.x"):
            model_for({"tasks": {"x": 3}}, "x")


if __name__ == "__main__":
    unittest.main()
