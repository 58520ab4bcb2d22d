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


class RandomTokenRateTest(unittest.TestCase):
    def test_a_share_of_runs_prints_the_token_drawn_from_the_seed(self):
        from vcurve_agents.scripted import draw_token, plan_step, RANDOM_TOKEN_COMMAND
        p = Params({"random_token_step": 4, "random_token_rate": 0.5})
        drawn = [draw_token(p, seed) for seed in range(400)]
        self.assertTrue(150 < sum(drawn) < 250, sum(drawn))
        self.assertEqual(drawn, [draw_token(p, seed) for seed in range(400)], "a function of the seed")
        # Rate 1 (the default) prints it on every run, rate 0 on none, and no step on none.
        self.assertTrue(all(draw_token(Params({"random_token_step": 4}), s) for s in range(50)))
        self.assertFalse(any(draw_token(Params({"random_token_step": 4, "random_token_rate": 0.0}), s)
                             for s in range(50)))
        self.assertFalse(draw_token(Params({}), 1))
        _, with_token = plan_step(p, 4, None, None, token=True)
        _, without = plan_step(p, 4, None, None, token=False)
        self.assertIn(RANDOM_TOKEN_COMMAND, with_token)
        self.assertNotIn(RANDOM_TOKEN_COMMAND, without)
        with self.assertRaisesRegex(ParameterError, "random_token_rate"):
            Params({"random_token_step": 4, "random_token_rate": 1.5})


if __name__ == "__main__":
    unittest.main()
