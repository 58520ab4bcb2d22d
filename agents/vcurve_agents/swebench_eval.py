"""Judge one patch with the official SWE-bench harness (swebench==5.0.2) for one instance.

The worker runs this program for a task whose evaluator is `swebench`, with the python of the
virtual environment scripts/swebench-venv makes. It reads one JSON request on stdin:

    {"instance": {...the dataset row...}, "patch": "diff --git ...", "run_id": "vcurve-<sha>-<rnd>",
     "log_dir": "/tmp/...", "image": "fallback image", "timeout_s": 1800}

and prints exactly one JSON line on stdout (everything the harness prints goes to stderr):

    {"outcome": "resolved" | "unresolved", "patch_applied": bool, "apply_command": str | null,
     "timed_out": bool, "test_exit_code": int | null, "container": name, "run_id": ..., "detail": str,
     "output_tail": str, "infra_failure": str (only when the harness flags one)}
    {"outcome": "infrastructure", "reason": str, ...}   the evaluation could not complete: run again
    {"outcome": "invalid_instance", "reason": str}      the row cannot be evaluated: retrying won't help

How the harness is driven (swebench/harness/run_evaluation.py of 5.0.2):

- `make_test_spec(row)` needs the v5 row fields instance_id, image, repo, version, FAIL_TO_PASS,
  PASS_TO_PASS, log_parser, eval_type and eval_script; 5.0.2 builds nothing from repo/version (the
  per-repo specs of v4 are gone) and never builds an image: `image` must exist on the local Docker
  Engine or be pullable. A row without `image` gets the task's image (`image` of the request).
- `run_instance(test_spec, pred, client, run_id, timeout)` writes under the relative path
  logs/run_evaluation/<run_id>/<model>/<instance>/ of the working directory, so this program
  changes into `log_dir` first (a temporary folder the worker owns and removes). It returns the
  report it finds there instead of running, so the run id carries the patch digest and a random
  part: the cache never answers for another patch, and no two evaluations share the container
  name `sweb.eval.<instance, lowercased>.<run_id>`.
- `run_instance` returns `(instance_id, report)` when the tests ran and were graded; on every
  error, including a patch that does not apply (">>>>> Patch Apply Failed" in run_instance.log)
  and a test run past `timeout` ("Test timed out after"), it logs, prints and returns None. Those
  two are verdicts (unresolved), as the harness's run report counts them; anything else that
  leaves no report (image missing, Docker errors, a crash) is an infrastructure failure. A report
  the harness flags `infra_failure` (its advisory environment-tier signatures: out of memory, the
  Docker daemon, the network) keeps the harness's own verdict, as its run report counts it
  (unresolved), with `"infra_failure": reason` in the answer so the worker counts it.
- The harness removes its container with the docker CLI; this program removes it again with the
  Docker SDK, by name, whatever happened.
"""

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path

# The v5 row fields make_test_spec reads (swebench/harness/utils.py).
REQUIRED_FIELDS = ("instance_id", "image", "repo", "version", "FAIL_TO_PASS", "PASS_TO_PASS",
                   "log_parser", "eval_type", "eval_script")
MODEL_NAME = "vcurve"
DEFAULT_TIMEOUT_S = 1800  # the harness's own default (run_evaluation --timeout)
OUTPUT_TAIL_CHARS = 4096


class Invalid(Exception):
    """The request or its row cannot be evaluated."""


class Infrastructure(Exception):
    """The evaluation could not complete."""


def container_name(instance_id, run_id):
    """The name run_evaluation.create_container gives the evaluation's container."""
    return f"sweb.eval.{instance_id.lower()}.{run_id}"


def check_request(request):
    if not isinstance(request, dict):
        raise Invalid("the request is not a JSON object")
    for key in ("patch", "run_id", "log_dir"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise Invalid(f"the request has no `{key}` string")
    row = request.get("instance")
    if not isinstance(row, dict):
        raise Invalid("the request has no `instance` object (the SWE-bench dataset row)")
    row = dict(row)
    if not row.get("image") and request.get("image"):
        row["image"] = request["image"]
    missing = [f for f in REQUIRED_FIELDS if row.get(f) in (None, "")]
    if missing:
        raise Invalid(
            f"the dataset row of {row.get('instance_id', '?')} lacks {', '.join(missing)}, which swebench 5.0.2 "
            "needs (make_test_spec reads instance_id, image, repo, version, FAIL_TO_PASS, PASS_TO_PASS, log_parser, "
            "eval_type and eval_script): give the study a dataset file whose rows carry the v5 fields")
    timeout = request.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise Invalid(f"timeout_s must be a positive integer, got {timeout!r}")
    return row, timeout


def test_spec_of(row):
    from swebench.harness.constants import EvalType
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec

    iid = row["instance_id"]
    if row["log_parser"] not in PARSER_REGISTRY:
        raise Invalid(f"the dataset row of {iid} names the log parser {row['log_parser']!r}, which swebench 5.0.2 "
                      "does not have")
    try:
        EvalType(row["eval_type"])
    except ValueError:
        raise Invalid(f"the dataset row of {iid} has eval_type {row['eval_type']!r}; swebench 5.0.2 knows "
                      f"{', '.join(e.value for e in EvalType)}") from None
    try:
        return make_test_spec(row)
    except Exception as e:  # a malformed FAIL_TO_PASS string, a wrong type
        raise Invalid(f"make_test_spec refuses the dataset row of {iid}: {type(e).__name__}: {e}") from None


def remove_containers(client, name):
    """Remove the evaluation's container (and the `<name>.<time>` one the harness makes on a
    name conflict); returns the names it removed."""
    import docker

    removed = []
    try:
        found = client.containers.list(all=True, filters={"name": name})
    except docker.errors.DockerException as e:
        print(f"swebench_eval: cannot list containers named {name}: {e}", file=sys.stderr)
        return removed
    for container in found:
        if container.name == name or container.name.startswith(name + "."):
            try:
                container.remove(force=True)
                removed.append(container.name)
            except docker.errors.NotFound:
                pass
            except docker.errors.DockerException as e:
                print(f"swebench_eval: cannot remove {container.name}: {e}", file=sys.stderr)
    return removed


def read(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def last_error(log):
    """The harness's last error in run_instance.log, for an infrastructure failure's reason."""
    lines = [line for line in log.splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if " - ERROR - " in lines[i] or "Error in evaluation for" in lines[i] or "Error" in lines[i]:
            return lines[i].split(" - ", 2)[-1].strip()
    return lines[-1].strip() if lines else "no log"


def apply_command(log):
    """Which of the harness's apply commands took the patch, read from run_instance.log."""
    from swebench.harness.constants import APPLY_PATCH_PASS
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    if APPLY_PATCH_PASS not in log:
        return None
    if f"{APPLY_PATCH_PASS}: verified already applied" in log:
        return "already applied"
    failed = log.count("Failed to apply patch to container: ")
    return GIT_APPLY_CMDS[failed] if failed < len(GIT_APPLY_CMDS) else None


def graded(entry, iid, report_path):
    """The verdict of the harness's report entry for `iid`: its `resolved`, as the harness's run
    report counts it. An entry the harness flags `infra_failure` (advisory: its environment-tier
    signatures) keeps the harness's verdict (unresolved in 5.0.2) and carries the flag's reason,
    so the worker counts it instead of running it again."""
    if not isinstance(entry, dict) or "resolved" not in entry:
        raise Infrastructure(f"the harness's report {report_path} has no entry for {iid}")
    resolved = bool(entry["resolved"])
    detail = "resolved" if resolved else (
        "the tests ran; not every FAIL_TO_PASS and PASS_TO_PASS test passes" if entry.get("patch_successfully_applied")
        else "the tests' output could not be graded (no parseable results)")
    out = {"outcome": "resolved" if resolved else "unresolved", "detail": detail,
           "tests_status": entry.get("tests_status")}
    if entry.get("infra_failure"):
        out["infra_failure"] = str(entry.get("infra_failure_reason") or "no reason given")
        out["detail"] = f"{detail}; the harness flags an infrastructure failure: {out['infra_failure']}"
    return out


def evaluate(request):
    row, timeout = check_request(request)
    test_spec = test_spec_of(row)
    run_id, iid = request["run_id"], test_spec.instance_id
    name = container_name(iid, run_id)

    import docker
    from swebench.harness.constants import APPLY_PATCH_FAIL, LOG_INSTANCE, LOG_REPORT, LOG_TEST_OUTPUT, \
        RUN_EVALUATION_LOG_DIR
    from swebench.harness.grading import parse_test_exit_code
    from swebench.harness.run_evaluation import _docker_client, run_instance

    os.chdir(request["log_dir"])
    log_dir = RUN_EVALUATION_LOG_DIR / run_id / MODEL_NAME / iid
    base = {"run_id": run_id, "container": name, "image": test_spec.image}
    if (log_dir / LOG_REPORT).exists():
        # The worker gives every evaluation a fresh folder and run id: a report here is not ours.
        raise Infrastructure(f"{log_dir / LOG_REPORT} exists before the run: the run id {run_id} was used before")
    try:
        client = _docker_client()
        client.ping()
    except docker.errors.DockerException as e:
        raise Infrastructure(f"cannot reach the Docker Engine: {e}") from None
    try:
        client.images.get(test_spec.image)
        image_missing = False
    except docker.errors.ImageNotFound:
        image_missing = True  # the harness tries to pull it
    except docker.errors.DockerException as e:
        raise Infrastructure(f"cannot inspect the image {test_spec.image}: {e}") from None

    pred = {"instance_id": iid, "model_name_or_path": MODEL_NAME, "model_patch": request["patch"]}
    crash = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            returned = run_instance(test_spec, pred, client, run_id, timeout=timeout)
    except Exception:
        # e.g. the docker CLI its cleanup runs is missing; a report it wrote before still stands.
        crash = traceback.format_exc()
        print(crash, file=sys.stderr)
        returned = None
    finally:
        removed = remove_containers(client, name)
        if removed:
            print(f"swebench_eval: removed {', '.join(removed)}", file=sys.stderr)

    log = read(log_dir / LOG_INSTANCE)
    test_output = read(log_dir / LOG_TEST_OUTPUT)
    report_path = log_dir / LOG_REPORT
    report = returned[1] if returned else (json.loads(report_path.read_text()) if report_path.exists() else None)
    verdict = {**base, "apply_command": apply_command(log), "timed_out": False,
               "test_exit_code": parse_test_exit_code(test_output), "output_tail": test_output[-OUTPUT_TAIL_CHARS:]}
    if report is not None:
        return {**verdict, **graded(report.get(iid), iid, report_path),
                "patch_applied": verdict["apply_command"] is not None}
    if APPLY_PATCH_FAIL in log:
        return {**verdict, "outcome": "unresolved", "patch_applied": False, "apply_command": None,
                "detail": "the harness reports that the patch does not apply (Patch Apply Failed)"}
    if "Test timed out after" in log:
        return {**verdict, "outcome": "unresolved", "patch_applied": True, "timed_out": True,
                "detail": f"the tests ran past the harness's timeout of {timeout} s"}
    if image_missing:
        raise Infrastructure(f"the image {test_spec.image} of {iid} is not on this Docker Engine and the harness "
                             f"could not pull it: {last_error(log)}")
    if crash is not None:
        raise Infrastructure(f"the harness crashed: {crash.strip().splitlines()[-1]}")
    raise Infrastructure(f"the harness ran {iid} without a report: {last_error(log)}")


def main():
    try:
        request = json.load(sys.stdin)
    except ValueError as e:
        result = {"outcome": "invalid_instance", "reason": f"the request on stdin is not JSON: {e}"}
    else:
        try:
            result = evaluate(request)
        except Invalid as e:
            result = {"outcome": "invalid_instance", "reason": str(e)}
        except Infrastructure as e:
            result = {"outcome": "infrastructure", "reason": str(e)}
        except Exception as e:
            traceback.print_exc()
            result = {"outcome": "infrastructure", "reason": f"swebench_eval crashed: {type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
