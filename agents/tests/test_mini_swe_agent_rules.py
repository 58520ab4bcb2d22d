"""The mini-swe-agent adapter's rules that need no mini-swe-agent: its settings (`model` object)
and which exceptions are the model server's (no outcome). Runs under any python with PyYAML."""

import types
import unittest

from vcurve_agents import mini_swe_agent as msa


def exception(module, name, base=Exception):
    """An exception class as litellm, openai or httpx define it (only its module matters)."""
    return type(name, (base,), {"__module__": module})


class SettingsTest(unittest.TestCase):
    def test_null_sampling_settings_send_none(self):
        # A run recorded without top_p resumes without one: null is "send none", not the default.
        s = msa.Settings({"model_name": "m", "temperature": 0, "top_p": None}, seed=1)
        self.assertEqual(s.model_kwargs["temperature"], 0)
        self.assertNotIn("top_p", s.model_kwargs)
        s = msa.Settings({"model_name": "m"}, seed=1)
        self.assertEqual((s.model_kwargs["temperature"], s.model_kwargs["top_p"]), (0.70, 0.80))
        with self.assertRaisesRegex(msa.ParameterError, "top_p"):
            msa.Settings({"model_name": "m", "top_p": "high"}, seed=1)

    def test_recorded_model_kwargs_are_laid_over_the_defaults(self):
        s = msa.Settings({"model_name": "m", "temperature": 0.0, "model_kwargs": {"drop_params": False}}, seed=2)
        self.assertEqual((s.model_kwargs["temperature"], s.model_kwargs["drop_params"]), (0.0, False))


class OutageTest(unittest.TestCase):
    """Model-server outages are no outcome, in base runs and continuations alike."""

    OUTAGES = [
        exception("litellm.exceptions", "ServiceUnavailableError"),
        exception("litellm.exceptions", "Timeout"),
        exception("litellm.exceptions", "APIConnectionError"),
        exception("openai", "APITimeoutError"),
        exception("httpx", "ConnectError"),
    ]

    def test_the_model_servers_exceptions_are_outages(self):
        for cls in self.OUTAGES:
            self.assertTrue(msa.is_infrastructure_failure(cls("down")), cls)
        # The agent's: an exceeded context window (litellm's too), its own errors, none.
        window = exception("litellm.exceptions", "ContextWindowExceededError")
        self.assertFalse(msa.is_infrastructure_failure(window("too long")))
        self.assertFalse(msa.is_infrastructure_failure(KeyError("x")))
        self.assertFalse(msa.is_infrastructure_failure(None))

    def run_ending_on(self, error, t):
        """`run` with an agent whose resume stopped on `error`, from a prefix of `t` steps."""
        finals = []
        start = types.SimpleNamespace(model={"model_name": "m"}, seed=5, t=t, budget=10, turns=False,
                                      messages=[{"role": "system", "content": "s"}] * (2 + 2 * t),
                                      task={"id": "x", "problem_statement": "p"})
        channel = types.SimpleNamespace(start=lambda: start, steps=0,
                                        final=lambda *a: finals.append(a))
        agent = types.SimpleNamespace(error=error, cost=0.0, n_calls=t, messages=[],
                                      config=types.SimpleNamespace(cost_limit=3.0),
                                      resume=lambda *a: {"exit_status": type(error).__name__, "submission": ""})
        build = msa.build
        msa.build = lambda channel, start, settings: agent
        try:
            status = msa.run(channel)
        finally:
            msa.build = build
        return status, finals

    def test_a_run_ended_by_an_outage_has_no_outcome(self):
        for t in (0, 3):  # a base run, a continuation
            for cls in self.OUTAGES:
                status, finals = self.run_ending_on(cls("503 Service Unavailable"), t)
                self.assertEqual((status, finals), (msa.EXIT_NO_OUTCOME, []), (t, cls))
            # The agent's own error is an outcome: a final of end type `error`.
            status, finals = self.run_ending_on(RuntimeError("bug"), t)
            self.assertEqual((status, [f[0] for f in finals]), (0, ["error"]), t)


if __name__ == "__main__":
    unittest.main()
