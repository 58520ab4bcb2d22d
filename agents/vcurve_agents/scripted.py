"""The scripted agent with a known V-curve, for task calc-1 (deploy/images/task-calc).

Run it as vcurve's agent runner command:

    PYTHONPATH=agents python3 -m vcurve_agents.scripted

It speaks the agent process protocol (docs/agent-protocol.md) and plays a fixed plan whose only
randomness is two draws from the run's seed, so the true prefix value of every history it produces
is known exactly. That makes it the reference for testing vcurve end to end: a curve vcurve
measures on its trajectories must match `truth()`.

Parameters (the start message's `model` object; unknown keys such as temperature are ignored):

    q                  probability of adopting the right hypothesis at the decision step   0.7
    r                  probability that the right hypothesis yields a correct fix          0.9
    decision_step      D, the step at which the hypothesis is adopted (>= 1)               8
    fix_step           F, the step that writes the fix (> D)                               D + 2
    random_token_step  k, a step whose output carries 24 random letters, so that replay   null (off)
                       finds the trajectory non-replayable at k (1 <= k < T)
    random_token_rate  the share of runs that print the token at step k: a run prints it   1.0
                       iff random.Random(f"{seed}/token").random() < rate, so that some
                       runs of a task replay and others do not
    timeout_s          the timeout of every command, seconds                               60
    tasks              per-task overrides: {task id: {parameter: value}}, laid over the rest  {}
                       for the run's task (so one study can hold a random-token variant)

The plan, steps 1-based, T = F + 3 steps in all:

    1 .. D-1   exploration, harmless reads (cycled if D-1 > 7):
                 1 cat README.md
                 2 ls calc | shuf                      the same lines in a varying order
                 3 python3 -m unittest discover -s tests   "Ran 7 tests in 0.001s": a duration
                 4 cat calc/parse.py
                 5 date -u ... && grep -n 'def ' calc/*.py  an ISO timestamp
                 6 cat calc/ops.py
                 7 python3 -c "...evaluate('10 - 4 - 3')..."  the symptom, and "took 0.0012s"
    D          a harmless read (cat calc/evaluate.py); the assistant message carries the line
               `HYPOTHESIS: right` (with probability q, drawn from the seed) or `HYPOTHESIS: wrong`
    D+1..F-1   reads of the file the hypothesis points at (parse.py, or ops.py)
    F          writes the fix the hypothesis implies; the message carries `FIX: correct|flawed|wrong`:
                 right -> correct (parse_expr and parse_term loop, left to right) with
                          probability r, else flawed (only parse_expr: "8 / 4 / 2" stays wrong)
                 wrong -> wrong (ops.sub without normalization; never resolves)
    F+1        python3 -m unittest discover -s tests (the visible tests pass with every fix)
    F+2        the reproduction again
    T = F+3    submits: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached`
               (as mini-swe-agent does); the output after the marker line is the submission, and
               the run ends with `final` end_type "submitted". If that command fails (non-zero
               return code or no marker) the run ends with end_type "error" and no submission.

With the defaults: D = 8, F = 10, T = 13; step 2 lists a folder in a varying order, steps 3 and 11
print unittest's duration, step 5 an ISO timestamp, step 7 a "took 0.0012s" duration; every other
step's output is the same on every run (with random_token_step = k, all but step k's).

If the budget runs out before step T, the run ends with end_type "step_cap" and submission ""
(nothing submitted, as mini-swe-agent's step limit ends a run): such a run fails.

State comes from the message prefix alone: the number of steps already taken is the number of
assistant messages in it, and the hypothesis and the fix are read back from their marker lines in
those messages. A decision not in the prefix is drawn from the seed: the hypothesis by
`random.Random(f"{seed}/hypothesis").random() < q`, the fix by `random.Random(f"{seed}/fix").random()
< r`. Command outputs never change what the agent does.

The truth. For a history h_t (t steps taken) resumed with budget b (None: enough),

    V(h_t) = q * r            t < D     (both decisions still to be drawn)
           = r * [right]      D <= t < F
           = [correct]        t >= F
    and V(h_t) = 0 whenever b < T - t (the run step-caps before it submits).

So V(h_0) = q * r (0.63 with the defaults), the curve of a failed run drops at the decision step D
(to 0 if the wrong hypothesis was adopted, else to r) and, on the right hypothesis, at F (to 0 with
the flawed fix). `truth(model, messages, budget)` returns it.

Sessions. When the start message announces turns (`"turns": true`, a task-state session), the
agent plays `SESSION_PLAN` instead: per instruction (turn k = the k-th instruction, whatever its
text; turns past the plan's four re-run the visible tests) a fixed sequence of commands whose only
randomness is the fix (correct with probability r, else flawed, drawn from
`random.Random(f"{seed}/session-fix")`, or `session.fix` given). Every task-state fact the agent
holds is a STATE marker in its messages,

    [[STATE id=t1-parse-right category=facts importance=3 fact="…"]]

placed in its narration (the assistant message's text), in a command's output (the command
prints it from base64, so the command header does not show it) or in its reasoning
(`reasoning_content`); each turn's report states, verbatim, the facts of a known subset of the
states (the plan's `reported` ones, or the ids in `session.report_states`). `session_truth(model,
seed)` lists the states with where each is and whether a report conveys it; categories are the
study's atom categories (`CATEGORIES`). After the worker's `end` the agent submits as a single run
does. The `session` object of `model`: {"fix": "correct"|"flawed"|null, "report_states": [id, …]
or null}.

An invalid parameter is reported on stderr and the process exits with status 2 without a `final`:
the worker counts such runs as having no outcome rather than as failures.
"""

import base64
import random
import re
import sys

from . import protocol

DEFAULTS = {
    "q": 0.7,
    "r": 0.9,
    "decision_step": 8,
    "fix_step": None,  # D + 2
    "random_token_step": None,
    "random_token_rate": 1.0,
    "timeout_s": 60,
}

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SUBMIT_COMMAND = f"echo {SUBMIT_MARKER} && git add -A && git diff --cached"
HYPOTHESIS_RE = re.compile(r"^HYPOTHESIS: (right|wrong)$", re.MULTILINE)
FIX_RE = re.compile(r"^FIX: (correct|flawed|wrong)$", re.MULTILINE)
# Letters only (no digits, so no rule for hex hashes or numbers can mask it).
RANDOM_TOKEN_COMMAND = "LC_ALL=C tr -dc 'A-Za-z' </dev/urandom | head -c 24; echo"

SYSTEM_PROMPT = """You are a helpful assistant that can interact with a computer shell to solve programming tasks.

Your response must contain exactly ONE bash code block with ONE command (or commands connected with && or ||).
Include a THOUGHT section before your command where you explain your reasoning process.
Format your response as shown in <format_example>.

<format_example>
THOUGHT: Your reasoning and analysis here.

```bash
your_command_here
```
</format_example>"""

TASK_TEMPLATE = """<pr_description>
Consider the following PR description:
{problem_statement}
</pr_description>

<instructions>
You are working in the repository at {workdir}. Make changes to non-test files so that the issue in
the PR description is resolved, in a way that is general and consistent with the codebase.
Every command runs in a new shell, in {workdir}. When you are done, submit your changes with

```bash
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached
```
</instructions>"""

REPRO = "python3 -c \"import calc; print(calc.evaluate('10 - 4 - 3'), calc.evaluate('2 - 3 + 4'), calc.evaluate('8 / 4 / 2'))\""
REPRO_TIMED = (
    "python3 -c \"import time, calc; t0 = time.perf_counter(); v = calc.evaluate('10 - 4 - 3'); "
    "print('10 - 4 - 3 =', v); print(f'took {time.perf_counter() - t0:.4f}s')\""
)
VISIBLE_TESTS = "python3 -m unittest discover -s tests"

EXPLORE = [
    ("Let me start with the repository's README to see what calc is and how its tests run.",
     "cat README.md"),
    ("Let me see which modules the package has.",
     "ls calc | shuf"),
    ("Let me run the visible tests to see where the code stands.",
     VISIBLE_TESTS),
    ("The expression is parsed before it is evaluated; let me read the parser.",
     "cat calc/parse.py"),
    ("Let me get an overview of every function in the package (and note the time I started).",
     "date -u +'started %Y-%m-%dT%H:%M:%SZ' && grep -n 'def ' calc/*.py"),
    ("Let me read the operators that the evaluator applies.",
     "cat calc/ops.py"),
    ("Let me reproduce the reported symptom.",
     REPRO_TIMED),
]

DECISION_READ = "cat calc/evaluate.py"
HYPOTHESIS_THOUGHT = {
    "right": ("The evaluator applies each node as it is given, so the tree must be wrong: parse_expr "
              "parses its right operand with parse_expr itself, so `10 - 4 - 3` becomes "
              "`10 - (4 - 3)`. Operators of equal precedence group from the right; the parser is "
              "where this must be fixed."),
    "wrong": ("The parser looks fine to me; the numbers go wrong in the arithmetic. ops.sub runs "
              "every difference through _normalize, which must be what corrupts the intermediate "
              "results of a chain of subtractions; ops.sub is where this must be fixed."),
}
HYPOTHESIS_READS = {
    "right": ("Let me look at the recursive calls of the binary levels of the parser again.",
              "grep -n 'def parse_\\|self.parse_' calc/parse.py"),
    "wrong": ("Let me look at the subtraction and the normalization again.",
              "grep -n -A 3 'def _normalize\\|def sub' calc/ops.py"),
}

_EXPR_BUGGY = '''    def parse_expr(self):
        left = self.parse_term()
        if self.at_op("+-"):
            op = self.advance().value
            right = self.parse_expr()
            return BinOp(op, left, right)
        return left
'''
_EXPR_FIXED = '''    def parse_expr(self):
        node = self.parse_term()
        while self.at_op("+-"):
            op = self.advance().value
            node = BinOp(op, node, self.parse_term())
        return node
'''
_TERM_BUGGY = '''    def parse_term(self):
        left = self.parse_unary()
        if self.at_op("*/%"):
            op = self.advance().value
            right = self.parse_term()
            return BinOp(op, left, right)
        return left
'''
_TERM_FIXED = '''    def parse_term(self):
        node = self.parse_unary()
        while self.at_op("*/%"):
            op = self.advance().value
            node = BinOp(op, node, self.parse_unary())
        return node
'''
_SUB_BUGGY = '''def sub(a, b):
    return _normalize(a - b)
'''
_SUB_WRONG = '''def sub(a, b):
    # Subtract directly: normalizing here corrupted chained subtractions.
    return a - b
'''


def _edit_command(path, replacements):
    """A command that replaces exact text in `path` and fails loudly when the text is not there."""
    lines = ["python3 - <<'EOF'", "import pathlib", f"p = pathlib.Path({path!r})", "s = p.read_text()"]
    for old, new in replacements:
        lines.append(f"old, new = {old!r}, {new!r}")
        lines.append("assert old in s, 'the code to replace is not there'")
        lines.append("s = s.replace(old, new)")
    lines += ["p.write_text(s)", f"print('edited', p)", "EOF"]
    return "\n".join(lines)


FIXES = {
    "correct": ("Both binary levels recurse on the right. I will make parse_expr and parse_term loop, "
                "building the tree from the left, and leave ^ (which should group from the right) alone.",
                _edit_command("calc/parse.py", [(_EXPR_BUGGY, _EXPR_FIXED), (_TERM_BUGGY, _TERM_FIXED)])),
    "flawed": ("parse_expr recurses on the right. I will make it loop, building the tree from the left.",
               _edit_command("calc/parse.py", [(_EXPR_BUGGY, _EXPR_FIXED)])),
    "wrong": ("I will make ops.sub subtract without normalizing the result.",
              _edit_command("calc/ops.py", [(_SUB_BUGGY, _SUB_WRONG)])),
}
# Which fix the hidden tests judge resolved (agents/tests check it against the real tests).
RESOLVES = {"correct": True, "flawed": False, "wrong": False}


class ParameterError(ValueError):
    pass


class Params:
    """The validated parameters of the `model` object."""

    def __init__(self, model=None):
        model = dict(model or {})
        get = lambda k: model[k] if model.get(k) is not None else DEFAULTS[k]  # noqa: E731
        self.q = _probability(get("q"), "q")
        self.r = _probability(get("r"), "r")
        self.decision_step = _integer(get("decision_step"), "decision_step", 1)
        fix = model.get("fix_step")
        self.fix_step = (self.decision_step + 2 if fix is None
                         else _integer(fix, "fix_step", self.decision_step + 1))
        self.length = self.fix_step + 3
        token = model.get("random_token_step")
        self.random_token_step = None if token is None else _integer(token, "random_token_step", 1, self.length - 1)
        self.random_token_rate = _probability(get("random_token_rate"), "random_token_rate")
        timeout = get("timeout_s")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ParameterError(f"model.timeout_s must be a positive number of seconds, got {timeout!r}")
        self.timeout_s = timeout


def model_for(model, task_id):
    """The settings for a run of `task_id`: `model` with `model["tasks"][task_id]` laid over it."""
    model = dict(model or {})
    per_task = model.pop("tasks", None) or {}
    if not isinstance(per_task, dict):
        raise ParameterError(f"model.tasks must map task ids to parameter overrides, got {per_task!r}")
    overrides = per_task.get(task_id) or {}
    if not isinstance(overrides, dict):
        raise ParameterError(f"model.tasks.{task_id} must be a mapping of parameters, got {overrides!r}")
    model.update(overrides)
    return model


def _probability(x, name):
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x <= 1.0:
        raise ParameterError(f"model.{name} must be a probability in [0, 1], got {x!r}")
    return float(x)


def _integer(x, name, lo, hi=None):
    if isinstance(x, bool) or not isinstance(x, int) or x < lo or (hi is not None and x > hi):
        allowed = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ParameterError(f"model.{name} must be an integer {allowed}, got {x!r}")
    return x


def draw_hypothesis(params, seed):
    return "right" if random.Random(f"{seed}/hypothesis").random() < params.q else "wrong"


def draw_token(params, seed):
    """Whether this run prints the random token at `random_token_step`."""
    return params.random_token_step is not None and random.Random(f"{seed}/token").random() < params.random_token_rate


def draw_fix(params, seed, hypothesis):
    if hypothesis != "right":
        return "wrong"
    return "correct" if random.Random(f"{seed}/fix").random() < params.r else "flawed"


class State:
    """What the agent knows, rebuilt from a message prefix."""

    def __init__(self, messages):
        assistant = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        self.steps = len(assistant)
        self.hypothesis = _first_marker(HYPOTHESIS_RE, assistant)
        self.fix = _first_marker(FIX_RE, assistant)


def _first_marker(pattern, contents):
    for c in contents:
        if isinstance(c, str):
            m = pattern.search(c)
            if m:
                return m.group(1)
    return None


def initial_messages(task):
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": TASK_TEMPLATE.format(
            problem_statement=task.get("problem_statement") or "", workdir=task.get("workdir") or ".")},
    ]


def plan_step(params, step, hypothesis, fix, markers=(), token=True):
    """The assistant message and command of step `step` (1-based), given the decisions so far.

    `markers` are the decision lines this step writes (`HYPOTHESIS: …`, `FIX: …`): normally the
    hypothesis at D and the fix at F; a prefix that is past D or F without them (not one this agent
    wrote) gets them at the step where the agent draws them. `token`: whether this run prints the
    random token at `random_token_step` (`draw_token`).
    """
    D, F = params.decision_step, params.fix_step
    if step < D:
        thought, command = EXPLORE[(step - 1) % len(EXPLORE)]
    elif step == D:
        thought, command = HYPOTHESIS_THOUGHT[hypothesis], DECISION_READ
    elif step < F:
        thought, command = HYPOTHESIS_READS[hypothesis]
    elif step == F:
        thought, command = FIXES[fix]
    elif step == F + 1:
        thought, command = "Let me check that the visible tests still pass.", VISIBLE_TESTS
    elif step == F + 2:
        thought, command = "Let me run the reproduction again.", REPRO
    else:
        thought, command = "I am done; let me submit my changes.", SUBMIT_COMMAND
    if token and step == params.random_token_step:
        command = f"{command}\n{RANDOM_TOKEN_COMMAND}"
    content = f"THOUGHT: {thought}\n"
    if markers:
        content += "\n" + "\n".join(markers) + "\n"
    content += f"\n```bash\n{command}\n```"
    return content, command


def observation(result, command):
    """The user message a command's result becomes (mini-swe-agent's templates)."""
    if result.timed_out or result.returncode is None:
        why = result.exception or "it timed out and was killed"
        return (f"The last command <command>{command}</command> did not finish: {why}.\n"
                f"The output of the command was:\n<output>\n{result.output}\n</output>")
    return f"<returncode>{result.returncode}</returncode>\n<output>\n{result.output}</output>"


def run(channel):
    """One run: from the start message to the final message."""
    start = channel.start()
    if start.turns:
        params, fix, plan = _session_params(model_for(start.model, start.task.get("id")), start.seed)
        protocol.log(f"scripted: a session, seed {start.seed}, fix {fix}, budget {start.budget} steps per turn")
        run_session(channel, start, params, plan)
        return
    params = Params(model_for(start.model, start.task.get("id")))
    messages = list(start.messages) or initial_messages(start.task)
    state = State(messages)
    if state.steps != start.t:
        protocol.log(f"scripted: the prefix holds {state.steps} steps, start says t={start.t}; going by the prefix")
    hypothesis, fix = state.hypothesis, state.fix
    if state.steps >= params.decision_step and hypothesis is None:
        protocol.log("scripted: the prefix is past the decision step but adopted no hypothesis; drawing one")
    protocol.log(f"scripted: seed {start.seed}, {state.steps} steps taken, budget {start.budget}, "
                 f"D={params.decision_step} F={params.fix_step} T={params.length}")

    step = state.steps
    while True:
        step += 1
        if channel.steps_left == 0:
            protocol.log(f"scripted: budget used up before step {step}: step_cap")
            channel.final("step_cap", "", messages)
            return
        markers = []
        if step >= params.decision_step and hypothesis is None:
            hypothesis = draw_hypothesis(params, start.seed)
            markers.append(f"HYPOTHESIS: {hypothesis}")
        if step >= params.fix_step and fix is None:
            fix = draw_fix(params, start.seed, hypothesis)
            markers.append(f"FIX: {fix}")
        content, command = plan_step(params, step, hypothesis, fix, markers, draw_token(params, start.seed))
        protocol.log(f"scripted: step {step}/{params.length}: {command.splitlines()[0]}")
        result = channel.exec(command, params.timeout_s)
        new = [{"role": "assistant", "content": content},
               {"role": "user", "content": observation(result, command)}]
        messages.extend(new)
        channel.step(new)
        if step >= params.length:
            lines = result.output.splitlines(keepends=True)
            if result.returncode == 0 and lines and lines[0].strip() == SUBMIT_MARKER:
                channel.final("submitted", "".join(lines[1:]), messages)
            else:
                protocol.log(f"scripted: the submission command failed (returncode {result.returncode})")
                channel.final("error", None, messages)
            return


# ---- Sessions ------------------------------------------------------------------------------------

CATEGORIES = ("facts", "failures", "progress", "environment", "risks", "decisions", "rejected_options",
              "assumptions")
STATE_RE = re.compile(r'\[\[STATE id=(\S+) category=(\S+) importance=(\d+) fact="([^"]*)"\]\]')


def _state(id, category, importance, fact, where="narration", reported=False):
    assert category in CATEGORIES and '"' not in fact and where in ("narration", "output", "reasoning")
    return {"id": id, "category": category, "importance": importance, "fact": fact, "where": where,
            "reported": reported}


def session_plan(fix):
    """The session's turns: for each, a list of steps (thought, command, [states]). `fix` is
    "correct" or "flawed"."""
    fixed_div = "1" if fix == "correct" else "4"
    return [
        [  # 1: Investigate; do not modify code
            ("Let me reproduce the reported symptom.", REPRO,
             [_state("t1-symptom", "facts", 2, "evaluate('10 - 4 - 3') returns 9 instead of 3", reported=True)]),
            ("The tree is built by the parser; let me read it.", "cat calc/parse.py",
             [_state("t1-parse-right", "facts", 3,
                     "parse_expr and parse_term recurse on their right operand, so equal-precedence operators "
                     "group from the right", reported=True),
              _state("t1-power-right", "facts", 2,
                     "parse_power groups ^ from the right on purpose", where="reasoning")]),
            ("Let me check whether the arithmetic is at fault.", "cat calc/ops.py",
             [_state("t1-not-ops", "rejected_options", 2,
                     "changing ops.sub was considered and rejected because _normalize only turns integral "
                     "floats into ints")]),
            ("Let me see how the visible tests are run.", VISIBLE_TESTS,
             [_state("t1-tests-cmd", "environment", 2,
                     "the visible tests run with python3 -m unittest discover -s tests and pass before any "
                     "change", where="output"),
              _state("t1-readme", "environment", 1, "the README describes calc as a small expression "
                     "evaluator")]),
        ],
        [  # 2: Implement a fix
            ("Before editing, let me confirm the parser has no loop yet.",
             "grep -c 'while self.at_op' calc/parse.py",
             [_state("t2-no-loop", "failures", 2,
                     "a first check for an existing loop in parse.py found none, so the grouping cannot be "
                     "fixed by a flag")]),
            (FIXES[fix][0], FIXES[fix][1],
             [_state("t2-fix", "decisions", 3,
                     "parse_expr and parse_term now loop and build the tree from the left" if fix == "correct"
                     else "only parse_expr now loops; parse_term still recurses on its right operand",
                     reported=True),
              _state("t2-keep-power", "assumptions", 2,
                     "the fix assumes ^ must keep grouping from the right", where="reasoning")]),
            ("Let me run the reproduction on the edited parser.", REPRO,
             [_state("t2-progress", "progress", 2, "the edit to calc/parse.py is applied and the symptom "
                     "10 - 4 - 3 now gives 3", reported=True)]),
        ],
        [  # 3: Run tests and report the result
            ("Let me run the visible tests.", VISIBLE_TESTS,
             [_state("t3-visible-pass", "progress", 2, "all visible tests pass after the fix", reported=True)]),
            ("Let me check a chain of divisions too.",
             "python3 -c \"import calc; print(calc.evaluate('8 / 4 / 2'))\"",
             [_state("t3-div-chain", "facts", 3 if fix == "flawed" else 2,
                     f"8 / 4 / 2 evaluates to {fixed_div} after the fix", where="output")]),
        ],
        [  # 4: Assess remaining risk
            ("Let me see what the change touches.", "git status --short && git diff --stat",
             [_state("t4-scope", "progress", 2, "the change touches only calc/parse.py", where="output")]),
            ("Let me look for a test of mixed operator chains.", "grep -n \"'2 - 3 + 4'\" tests/test_calc.py",
             [_state("t4-no-mixed-test", "risks", 2,
                     "no visible test covers mixed chains such as 2 - 3 + 4", reported=True),
              _state("t4-term-risk", "risks", 3,
                     "division and modulo chains still group from the right because parse_term was not changed"
                     if fix == "flawed" else "no caller relies on the old right grouping of - and /")]),
        ],
    ]


def _session_params(model, seed):
    params = Params(model)
    session = dict((model or {}).get("session") or {})
    fix = session.get("fix")
    if fix is None:
        fix = "correct" if random.Random(f"{seed}/session-fix").random() < params.r else "flawed"
    if fix not in ("correct", "flawed"):
        raise ParameterError(f"model.session.fix must be \"correct\", \"flawed\" or null, got {fix!r}")
    plan = session_plan(fix)
    reported = session.get("report_states")
    if reported is not None:
        ids = {st["id"] for turn in plan for _, _, states in turn for st in states}
        if not isinstance(reported, list) or any(r not in ids for r in reported):
            raise ParameterError(f"model.session.report_states must list state ids of {sorted(ids)}, got {reported!r}")
        for turn in plan:
            for _, _, states in turn:
                for st in states:
                    st["reported"] = st["id"] in reported
    return params, fix, plan


def state_marker(state):
    return (f'[[STATE id={state["id"]} category={state["category"]} importance={state["importance"]} '
            f'fact="{state["fact"]}"]]')


def session_truth(model, seed):
    """The states a session of this agent holds: [{id, category, importance, fact, where, reported,
    turn}] in order, and the fix: {"fix": …, "states": […]}."""
    _, fix, plan = _session_params(model_for(model, "calc-1"), seed)
    states = [dict(st, turn=k) for k, turn in enumerate(plan, 1) for _, _, sts in turn for st in sts]
    return {"fix": fix, "states": states}


def _report(k, instruction, states):
    lines = [f"Turn {k} ({instruction.strip()}) is done."]
    lines += [f"- {st['fact']}" for st in states if st["reported"]]
    if len(lines) == 1:
        lines.append("Nothing further to report.")
    return "\n".join(lines)


def run_session(channel, start, params, plan):
    """A session: per instruction, the plan's turn, then turn_end with the report; after end, submit."""
    messages = list(start.messages) or initial_messages(start.task)[:1]
    if not start.messages:
        # The task goes with the system prompt; each instruction is its own user message.
        messages.append({"role": "user", "content": TASK_TEMPLATE.format(
            problem_statement=start.task.get("problem_statement") or "", workdir=start.task.get("workdir") or ".")})
    while (instruction := channel.next_instruction()) is not None:
        k = instruction.turn
        messages.append({"role": "user", "content": instruction.content})
        steps = plan[k - 1] if k <= len(plan) else [("Let me run the visible tests again.", VISIBLE_TESTS, [])]
        turn_states = []
        for thought, command, states in steps:
            if channel.steps_left == 0:
                protocol.log(f"scripted: turn {k} used its budget of {instruction.budget} steps: step_cap")
                channel.final("step_cap", "", messages)
                return
            reply = {"role": "assistant", "content": ""}
            narration = [st for st in states if st["where"] == "narration"]
            printed = [st for st in states if st["where"] == "output"]
            reasoned = [st for st in states if st["where"] == "reasoning"]
            shell = command
            if printed:
                text = "".join(state_marker(st) + "\n" for st in printed).encode()
                shell = f"{command}\necho {base64.b64encode(text).decode()} | base64 -d"
            content = f"THOUGHT: {thought}\n"
            if narration:
                content += "\n" + "\n".join(state_marker(st) for st in narration) + "\n"
            reply["content"] = content + f"\n```bash\n{shell}\n```"
            if reasoned:
                reply["reasoning_content"] = "\n".join(state_marker(st) for st in reasoned)
            protocol.log(f"scripted: turn {k}: {command.splitlines()[0]}")
            result = channel.exec(shell, params.timeout_s)
            new = [reply, {"role": "user", "content": observation(result, shell)}]
            messages.extend(new)
            channel.step(new)
            turn_states += states
        report = _report(k, instruction.content, turn_states)
        messages.append({"role": "assistant", "content": report})
        channel.turn_end(report, messages)
    result = channel.exec(SUBMIT_COMMAND, params.timeout_s)
    lines = result.output.splitlines(keepends=True)
    if result.returncode == 0 and lines and lines[0].strip() == SUBMIT_MARKER:
        channel.final("submitted", "".join(lines[1:]), messages)
    else:
        channel.final("error", None, messages)


def truth(model, messages, budget=None):
    """The true prefix value of `messages` (a prefix this agent produced) under `model`.

    Returns {"t", "decision_step", "fix_step", "length", "hypothesis", "fix", "wrong_hypothesis",
    "value"}: the steps taken, D, F, T, the decisions the prefix holds (None: not yet taken),
    whether it adopted the wrong hypothesis, and V(h_t) with `budget` steps left (None: enough).
    """
    params = Params(model)
    state = State(messages)
    t = state.steps
    if budget is not None and budget < params.length - t:
        value = 0.0
    elif t < params.decision_step or state.hypothesis is None:
        value = params.q * params.r
    elif t < params.fix_step or state.fix is None:
        value = params.r if state.hypothesis == "right" else 0.0
    else:
        value = 1.0 if RESOLVES[state.fix] else 0.0
    return {
        "t": t,
        "decision_step": params.decision_step,
        "fix_step": params.fix_step,
        "length": params.length,
        "hypothesis": state.hypothesis,
        "fix": state.fix,
        "wrong_hypothesis": state.hypothesis == "wrong",
        "value": value,
    }


def main():
    channel = protocol.AgentChannel()
    try:
        run(channel)
    except ParameterError as e:
        protocol.log(f"scripted: invalid parameters: {e}")
        return 2
    except protocol.ProtocolError as e:
        protocol.log(f"scripted: protocol error: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
