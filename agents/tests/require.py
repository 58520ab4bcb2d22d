"""The gate for the agents' tests that need a service: the Python side of vcurve_testkit::require.

A test (or a test class) that needs Docker, the test task image or an adapter's virtual
environment asks for it first::

    python, = require.require(require.MINI_SWE_AGENT)   # in setUpClass or the test

or decorates itself with ``@require.needs(require.DOCKER, require.TASK_IMAGE)``. When everything is
there, ``require`` gives each one's value (a path, a tag). When one is missing, the test is skipped
(``unittest.SkipTest``) with one line saying what to start; with ``VCURVE_TEST_REQUIRE=all`` (CI and
scripts/test set it; or comma-separated names: ``docker,swebench``) it fails instead, with the same
line. ``VCURVE_TEST_SKIP`` (``all``, or names) makes services absent whatever the machine has
(scripts/test quick sets it). Detection is cheap and local: environment variables, files, PATH.
"""

import os
import shutil
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

DOCKER = "docker"
TASK_IMAGE = "task-image"
MINI_SWE_AGENT = "mini-swe-agent"
SWEBENCH = "swebench"

_NAMES = {
    DOCKER: ("Docker", "start dockerd (the docker CLI and /var/run/docker.sock)"),
    TASK_IMAGE: ("the test task image", "set VCURVE_TEST_TASK_IMAGE to the task=TAG deploy/images/build prints"),
    MINI_SWE_AGENT: ("the mini-swe-agent venv", "run scripts/mini-swe-agent-venv, or set VCURVE_MSA_PYTHON"),
    SWEBENCH: ("the swebench venv", "run scripts/swebench-venv, or set VCURVE_SWEBENCH_PYTHON"),
}


def _var(name):
    value = os.environ.get(name, "")
    return value if value.strip() else None


def _file(path):
    return path if path and os.path.exists(path) and not os.path.isdir(path) else None


def detect(service):
    """The service's value on this machine (a path, a tag), or None."""
    if service == DOCKER:
        host = _var("DOCKER_HOST")
        if host is not None and not host.startswith("unix://"):
            return None
        socket = host[len("unix://"):] if host else "/var/run/docker.sock"
        return socket if _file(socket) and shutil.which("docker") else None
    if service == TASK_IMAGE:
        return _var("VCURVE_TEST_TASK_IMAGE")
    if service == MINI_SWE_AGENT:
        return _file(_var("VCURVE_MSA_PYTHON") or os.path.join(REPO, ".venv", "mini-swe-agent", "bin", "python"))
    if service == SWEBENCH:
        return _file(_var("VCURVE_SWEBENCH_PYTHON") or os.path.join(REPO, ".venv", "swebench", "bin", "python"))
    raise ValueError(f"unknown service {service!r}")


def _names(service, var):
    return any(word.strip() in ("all", service) for word in os.environ.get(var, "").split(","))


def decide(services):
    """("run", values) | ("skip", line) | ("fail", message) for `services` on this machine."""
    values, missing = [], []
    for service in services:
        value = None if _names(service, "VCURVE_TEST_SKIP") else detect(service)
        (values.append(value) if value is not None else missing.append(service))
    if not missing:
        return "run", values
    line = "needs " + ", ".join(f"{_NAMES[s][0]} ({_NAMES[s][1]})" for s in missing) + " — or run scripts/test"
    left_out = [s for s in missing if _names(s, "VCURVE_TEST_SKIP")]
    if any(_names(s, "VCURVE_TEST_REQUIRE") and s not in left_out for s in missing):
        return "fail", line + " (VCURVE_TEST_REQUIRE requires it)"
    return "skip", line + (" (VCURVE_TEST_SKIP leaves it out)" if left_out else "")


def require(*services):
    """The services' values; raises unittest.SkipTest, or AssertionError when one is required."""
    verdict, what = decide(services)
    if verdict == "run":
        return what
    if verdict == "fail":
        raise AssertionError(what)
    raise unittest.SkipTest(what)


def needs(*services):
    """A decorator for a test or a TestCase class: it runs only with `services` (see require)."""
    def decorate(test):
        if isinstance(test, type):
            original = test.__dict__.get("setUpClass")

            def setUpClass(cls):
                require(*services)
                (original.__func__(cls) if original else super(test, cls).setUpClass())

            test.setUpClass = classmethod(setUpClass)
            return test

        def gated(*args, **kwargs):
            require(*services)
            return test(*args, **kwargs)

        gated.__name__, gated.__qualname__, gated.__doc__ = test.__name__, test.__qualname__, test.__doc__
        return gated

    return decorate
