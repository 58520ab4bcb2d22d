"""Run mini-swe-agent 2.4.6 the way its users do, without vcurve: its own `DefaultAgent`,
`LitellmModel` and `DockerEnvironment` under its SWE-bench configuration
(`config/benchmarks/swebench.yaml`, as `mini-extra swebench-single` builds them), on a local task
image, saving the run as mini-swe-agent saves it (`.traj.json`, format mini-swe-agent-1.1).

Test code, not product: the end-to-end round trip (tests/tests/e2e/mini_swe_agent.rs) imports the file
this writes with `vcurve import mini-swe-agent`, then replays and continues it under vcurve.

    PYTHONPATH=agents .venv/mini-swe-agent/bin/python agents/tests/native_mini_swe_agent.py \\
        --task TASK.json --base-url http://127.0.0.1:PORT/v1 --seed 7 --out RUN.traj.json

TASK.json is a vcurve task (`deploy/images/build --print-task`): its `image`, `workdir`, `id` and
`problem_statement` stand for the SWE-bench instance. The container runs with networking disabled
and is removed when the run ends. Exit status 0 when the run ended with any exit status of the
agent's (the trajectory is written), 1 when mini-swe-agent raised.
"""

import argparse
import json
import sys
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="vcurve task JSON (image, workdir, problem_statement)")
    parser.add_argument("--base-url", required=True, help="the OpenAI-compatible server")
    parser.add_argument("--model", default="openai/mock-model", help="litellm model name")
    parser.add_argument("--seed", type=int, required=True, help="the sampling seed sent with every request")
    parser.add_argument("--step-limit", type=int, default=30)
    parser.add_argument("--out", required=True, help="where to write the .traj.json")
    args = parser.parse_args(argv)

    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.docker import DockerEnvironment
    from minisweagent.models import get_model

    from vcurve_agents.mini_swe_agent import swebench_config

    task = json.loads(Path(args.task).read_text())
    config = swebench_config()
    model_config = dict(config["model"])
    model_config["model_name"] = args.model
    model_config["cost_tracking"] = "ignore_errors"
    model_config["model_kwargs"] = {
        **model_config.get("model_kwargs", {}),
        "api_base": args.base_url,
        "api_key": "EMPTY",
        "seed": args.seed,
        "temperature": 0.7,
        "top_p": 0.8,
    }
    env_config = {k: v for k, v in config["environment"].items() if k != "environment_class"}
    env_config["image"] = task["image"]
    env_config["cwd"] = task.get("workdir") or env_config.get("cwd", "/")
    env_config["run_args"] = ["--rm", "--network", "none", "--label", "vcurve.test=native-mini-swe-agent"]
    agent_config = dict(config["agent"])
    agent_config.pop("agent_class", None)
    agent_config["step_limit"] = args.step_limit
    agent_config["output_path"] = Path(args.out)

    env = DockerEnvironment(**env_config)
    try:
        agent = DefaultAgent(get_model(config=model_config), env, **agent_config)
        result = agent.run(task["problem_statement"])
    finally:
        env.cleanup()
    print(json.dumps({"exit_status": result.get("exit_status"), "steps": agent.n_calls}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
