#!/usr/bin/env python3
"""Generate the held-out fixtures for `vcurve analyze` from the reference estimator.

    python3 tests/reference/make_heldout.py            # (re)writes tests/fixtures/heldout/
    python3 tests/reference/make_heldout.py --check    # regenerates in memory, diffs the files

Writes tests/fixtures/heldout/case_01 .. case_60 (fixed seed) and hand_01 .. hand_03 (hand-made,
expected values derived by hand below and asserted against the reference). Each folder holds
points.csv (t,n,successes), optionally base.csv (success,steps), args.json ({"length", "budget"})
and expected.json (the reference output).

Cases 01-20 are targeted constructions (edge cases named in their `note`), cases 21-60 are curves
from five families sampled through a simplified version of the adaptive schedule of SPEC §4
(screening, bisection, confirmation, point-of-no-return search, label probes) plus a few partial
points with n < 8. The script asserts that the whole set covers every feature listed in COVERAGE.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import estimator  # noqa: E402

SEED = 20240917
OUT = os.path.normpath(os.path.join(HERE, "..", "fixtures", "heldout"))
N_CASES = 60


# --- a simplified adaptive schedule (SPEC §4) used to pick sample sizes ----------------------------
def simulate(rng: random.Random, length: int, value, labels=(), partial=0) -> list[tuple]:
    """Sample a failed trajectory's points the way the schedule would. `value(t)` is the true V."""
    n: dict[int, int] = {}
    s: dict[int, int] = {}

    def raise_to(t: int, k: int) -> None:
        n.setdefault(t, 0)
        s.setdefault(t, 0)
        while n[t] < k:
            n[t] += 1
            s[t] += rng.random() < value(t)

    def vh(t: int) -> float:
        return 0.0 if t == length else s[t] / n[t]

    anchors = sorted({0, *range(5, 51, 5), *range(60, length, 10), length - 1} & set(range(length)))
    for a in anchors:
        raise_to(a, 8)
    pairs = list(zip(anchors, anchors[1:] + [length]))
    big = [p for p in pairs if vh(p[0]) - vh(p[1]) >= 0.25]
    big = sorted(big, key=lambda p: -(vh(p[0]) - vh(p[1])))[:3]
    bracketed = []
    for a, b in big:
        while b - a > 1:
            m = (a + b) // 2
            raise_to(m, 8)
            if vh(a) - vh(m) >= vh(m) - vh(b):
                b = m
            else:
                a = m
        bracketed.append((a, b))
    ranked = sorted(bracketed, key=lambda p: -(vh(p[0]) - vh(p[1])))
    for i, (a, b) in enumerate(ranked[:2]):
        if i == 1 and vh(a) - vh(b) < 0.25:
            break
        for t in (a, b):
            if t < length:
                raise_to(t, 32)

    def certified(t: int) -> bool:
        return s[t] == 0 and estimator.wilson(0, n[t], estimator.Z_ONE_SIDED)[1] <= 0.15 + 1e-9

    for a in anchors:
        if s[a] > 0:
            continue
        raise_to(a, 24)
        if not certified(a):
            continue
        earlier = [t for t in n if t < a and s[t] > 0]
        if earlier:
            lo, hi = max(earlier), a
            while hi - lo > 1:
                m = (lo + hi) // 2
                raise_to(m, 8)
                if s[m] == 0:
                    raise_to(m, 24)
                if certified(m):
                    hi = m
                else:
                    lo = m
        break

    for m in labels:
        for t in (m - 1, m):
            if 0 <= t < length:
                raise_to(t, 16)
        if 1 <= m < length and vh(m - 1) - vh(m) >= 0.20:
            raise_to(m - 1, 32)
            raise_to(m, 32)

    free = [t for t in range(length) if t not in n]
    for t in rng.sample(free, min(partial, len(free))):
        raise_to(t, rng.randint(1, 7))
    return sorted((t, n[t], s[t]) for t in n)


def family_value(rng: random.Random, family: str, length: int):
    """A true V(t) for a failed trajectory of the named family."""
    p0 = rng.choice([0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0])
    if family == "cliff":
        tc = rng.randint(0, length)  # V drops just before step tc (tc == length: at the last step)
        low = rng.choice([0.0, 0.0, 0.02, 0.05])
        return lambda t: p0 if t < tc else low
    if family == "plateau_cliff":
        t1 = rng.randint(0, max(0, length - 2))
        t2 = rng.randint(t1, length)
        mid = p0 * rng.choice([0.4, 0.5, 0.6])
        return lambda t: p0 if t < t1 else (mid if t < t2 else 0.0)
    if family == "erosion":
        t1 = rng.randint(0, length // 2)
        t2 = rng.randint(t1 + 1, length + 1)
        return lambda t: max(0.0, p0 * (1 - max(0, t - t1) / (t2 - t1)))
    if family == "recovery":
        # a dip followed by a partial recovery: the raw curve rises and PAVA pools
        t1 = rng.randint(0, max(0, length // 2))
        t2 = rng.randint(t1, length)
        t3 = rng.randint(t2, length)
        return lambda t: p0 if t < t1 else (p0 * 0.3 if t < t2 else (p0 * 0.7 if t < t3 else 0.0))
    if family == "flat":
        return lambda t: 0.0
    raise ValueError(family)


def base_runs(rng: random.Random, budget: int, kind: str):
    if kind == "none":
        return None
    k = {"generous": rng.randint(4, 8), "moderate": rng.randint(2, 6), "stingy": rng.randint(0, 2)}[kind]
    runs = []
    for i in range(8):
        if i < k:
            runs.append((1, rng.randint(5, budget)))
        else:
            runs.append((0, rng.choice([budget, rng.randint(5, budget)])))
    rng.shuffle(runs)
    return runs


# --- targeted constructions ------------------------------------------------------------------------
def targeted() -> list[dict]:
    c = []

    def add(note, points, length, base=None, budget=100, shuffle=False):
        c.append(dict(note=note, points=points, length=length, base=base, budget=budget, shuffle=shuffle))

    add("T=1, one resolved point: the only pair ends at the terminal", [(0, 8, 5)], 1)
    add("T=1, only an unresolved point: flat although the fit is non-zero; restart at the terminal",
        [(0, 3, 2)], 1, base=[(1, 40), (0, 100), (0, 100), (1, 99), (0, 100), (0, 12), (0, 100), (0, 100)])
    add("T=2 all-zero flat, certified at t=0 with n=24", [(0, 24, 0), (1, 8, 0)], 2)
    add("exact tie 5/24 = 5/24 where float makes the later drop larger by an ulp: earliest wins",
        [(0, 8, 4), (10, 24, 7), (20, 24, 2)], 30)
    add("tie 0.25/0.25 (pair to terminal) and C = 0.5 exactly: cliff, earliest pair",
        [(0, 16, 8), (6, 8, 2), (11, 8, 2)], 12)
    add("three equal drops of 0.25: erosion with C = 1/3, earliest pair",
        [(0, 8, 6), (10, 8, 4), (20, 8, 2)], 40)
    add("rise at T-1 pooled with T-2, tie between (25,45) and the terminal pair",
        [(0, 8, 6), (25, 8, 5), (45, 8, 1), (49, 8, 4)], 50)
    add("rise at T-1 pools back over three points; later raw 7/8 forbids every PNR",
        [(0, 8, 4), (5, 8, 1), (10, 8, 0), (15, 8, 0), (19, 8, 7)], 20)
    add("PNR: later raw V-hat exactly 0.15 (3/20) does not forbid certification at 20",
        [(0, 8, 5), (10, 8, 3), (20, 24, 0), (30, 20, 3), (40, 8, 0), (59, 8, 0)], 60)
    add("PNR: later raw V-hat 0.20 (4/20) forbids certification: uncertified",
        [(0, 8, 5), (10, 8, 3), (20, 24, 0), (30, 20, 4), (40, 8, 0), (59, 8, 0)], 60)
    add("PNR at n=16 s=0 (U=0.1447); later 1/8 allowed; unresolved 4/5 ignored by PNR but pooled by fit",
        [(0, 8, 6), (5, 8, 5), (10, 16, 0), (15, 8, 1), (20, 5, 4), (39, 8, 0)], 40)
    add("restart by tolerance: R = 0.625, fit = 21/40 = 0.525 (SPEC §3 example)",
        [(0, 8, 3), (5, 32, 18), (10, 8, 0), (29, 8, 0)], 30,
        base=[(1, 20), (1, 35), (1, 50), (1, 60), (1, 70), (0, 100), (0, 100), (0, 64)])
    add("lost at the last step (decisive pair ends at the terminal); restart only at the terminal",
        [(0, 8, 6), (40, 8, 6), (80, 8, 5), (89, 8, 5)], 90,
        base=[(1, 10), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100)])
    add("budget 50 < T = 80: R(B - t) is 0 for t > 20; restart at 10",
        [(0, 8, 8), (5, 8, 8), (10, 8, 7), (20, 8, 4), (30, 8, 0), (50, 24, 0), (79, 8, 0)], 80,
        base=[(1, 30)] * 8, budget=50)
    add("onset: Fisher 765/12870 = 0.059 not significant, 4/8 vs 0/8 = 0.0385 is",
        [(0, 8, 7), (5, 8, 7), (10, 8, 3), (15, 8, 4), (20, 8, 0), (39, 8, 0)], 40)
    add("onset across unresolved points, rows shuffled in the CSV",
        [(0, 8, 8), (3, 2, 0), (6, 8, 3), (12, 4, 4), (18, 8, 0)], 30, shuffle=True)
    add("all-zero curve at T=120 > B: flat, certified at 5, restart at 0",
        [(0, 8, 0), (5, 24, 0), (10, 8, 0), (50, 8, 0), (110, 8, 0), (119, 8, 0)], 120,
        base=[(1, 60), (0, 100), (1, 90), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100)])
    add("all-zero curve screened at K=8 only: flat, uncertified",
        [(t, 8, 0) for t in (0, 5, 10, 15, 20, 25, 30, 35, 36)], 37)
    add("no resolved sampled point: flat with a non-zero fit",
        [(0, 7, 5), (4, 7, 3), (9, 2, 0)], 10)
    add("onset p = 0.1 exactly is not significant; restart absent with base runs",
        [(0, 8, 3), (10, 8, 0), (20, 8, 0), (39, 8, 0)], 40,
        base=[(1, 95), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100)])
    return c


def sampled(rng: random.Random, count: int) -> list[dict]:
    families = ["cliff", "plateau_cliff", "erosion", "recovery", "flat"]
    c = []
    for i in range(count):
        family = families[i % len(families)]
        length = rng.choice([rng.randint(1, 12), rng.randint(13, 60), rng.randint(61, 120), 100, 100])
        budget = rng.choice([100] * 6 + [60, 80, 120, 150])
        value = family_value(rng, family, length)
        labels = rng.sample(range(1, length + 1), min(length, rng.randint(0, 3)))
        points = simulate(rng, length, value, labels=labels, partial=rng.randint(0, 3))
        base = base_runs(rng, budget, rng.choice(["none", "generous", "moderate", "stingy"]))
        c.append(dict(note=f"sampled {family}", points=points, length=length, base=base,
                      budget=budget, shuffle=rng.random() < 0.1))
    return c


# --- hand-made cases, every expected value derived by hand ------------------------------------------
def hand_cases() -> list[dict]:
    cases = []

    # hand_01: T = 10, no base runs; points 6/8 @0, 7/8 @4, 2/8 @6, 0/8 @9.
    #   PAVA: 0.75 < 0.875 is a violation -> pool {0,4} = 13/16 = 0.8125; then 0.25, 0; terminal 0.
    #   All four points resolved. Drops: (0,4) 0, (4,6) 0.5625, (6,9) 0.25, (9,10) 0.
    #   t* = 5, decisive [4, 6]; C = 0.5625 / 0.8125 = 9/13 = 0.6923 -> cliff.
    #   Onset: (0,4) 6/8 vs 7/8 -> p > 0.5. (4,6) 7/8 vs 2/8: K = 9, draws 8 of 16,
    #     P(X>=7) = [C(9,7)C(7,1) + C(9,8)C(7,0)] / C(16,8) = (252 + 9)/12870 = 0.0203 -> onset 5, [4,6].
    #   PNR: no sampled point certifies (0/8 has U = 0.2528) -> pnr = 10, uncertified.
    #   Wilson 2/8, z = 1.96: z²/n = 0.4802, center = (0.25 + 0.2401)/1.4802 = 0.33110,
    #     half = 1.96/1.4802 * sqrt(0.0234375 + 0.0150063) = 0.25963 -> [0.0715, 0.5907].
    cases.append(dict(
        name="hand_01", points=[(0, 8, 6), (4, 8, 7), (6, 8, 2), (9, 8, 0)], length=10, base=None,
        budget=100,
        hand={"t_star": 5, "decisive_interval": [4, 6], "concentration": 9 / 13, "shape": "cliff",
              "onset": 5, "onset_interval": [4, 6], "pnr": 10, "pnr_certified": False,
              "restart_point": None,
              "v_fit": [0.8125, 0.8125, 0.25, 0.0],
              "wilson_2_8": (0.0715, 0.5907)},
    ))

    # hand_02: T = 20, budget 100; points 4/8 @0, 0/24 @10, 1/8 @15, 0/8 @19;
    #   base runs: successes at 30, 85, 95 steps, five failures (n_base = 8).
    #   PAVA: 0.5, 0, then 1/8 > 0 -> pool {10,15} = 1/32 = 0.03125; 0/8 @19 = 0; terminal 0.
    #   Drops: (0,10) 0.46875, (10,15) 0, (15,19) 0.03125, (19,20) 0.
    #   t* = 1, [0, 10]; C = 0.46875 / 0.5 = 0.9375 -> cliff.
    #   Onset: (0,10) 4/8 vs 0/24: K = 4, draws 8 of 32, P(X>=4) = C(28,4)/C(32,8)
    #     = 20475/10518300 = 0.00195 -> onset 1, [0, 10].
    #   PNR: t=10 has U(0/24) = 0.1013 <= 0.15, later resolved raw values 1/8 = 0.125 and 0 are
    #     <= 0.15 -> pnr = 10, certified.
    #   Restart: t=0: R(100) = 3/8 = 0.375, minus 0.5 < 0.1; t=10: R(90) = 2/8 = 0.25, minus 0.03125
    #     = 0.21875 >= 0.1 -> restart 10.
    cases.append(dict(
        name="hand_02", points=[(0, 8, 4), (10, 24, 0), (15, 8, 1), (19, 8, 0)], length=20,
        base=[(1, 30), (1, 85), (1, 95), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100)],
        budget=100,
        hand={"t_star": 1, "decisive_interval": [0, 10], "concentration": 0.9375, "shape": "cliff",
              "onset": 1, "onset_interval": [0, 10], "pnr": 10, "pnr_certified": True,
              "restart_point": 10,
              "v_fit": [0.5, 0.03125, 0.03125, 0.0]},
    ))

    # hand_03: T = 5, budget 8; points 2/8 @0, 8/32 @1, 2/8 @2, 1/4 @4 (unresolved);
    #   base runs: one success at 3 steps, three failures at 8 (n_base = 4).
    #   PAVA: all raw values are 0.25; equal values are no violation -> fit 0.25 everywhere.
    #   Resolved: 0, 1, 2 and the terminal 5 (point 4 has n = 4 < 8).
    #   Drops: (0,1) 0, (1,2) 0, (2,5) 0.25 -> t* = 3, [2, 5]; C = 1 -> cliff.
    #   Onset: 2/8 vs 8/32 and 8/32 vs 2/8 are not significant (equal proportions) -> null.
    #   PNR: no sampled point certifies -> 5, uncertified.
    #   Restart: R(b) = 1/4 for b >= 3. t=0: R(8) - 0.25 = 0; t=1: R(7) - 0.25 = 0; t=2: R(6) - 0.25
    #     = 0; terminal t=5: R(3) - 0 = 0.25 >= 0.1 -> restart 5.
    cases.append(dict(
        name="hand_03", points=[(0, 8, 2), (1, 32, 8), (2, 8, 2), (4, 4, 1)], length=5,
        base=[(1, 3), (0, 8), (0, 8), (0, 8)], budget=8,
        hand={"t_star": 3, "decisive_interval": [2, 5], "concentration": 1.0, "shape": "cliff",
              "onset": None, "onset_interval": None, "pnr": 5, "pnr_certified": False,
              "restart_point": 5,
              "v_fit": [0.25, 0.25, 0.25, 0.25]},
    ))
    return cases


def check_hand(case: dict, result: dict) -> None:
    hand = case["hand"]
    for key in ("t_star", "decisive_interval", "shape", "onset", "onset_interval", "pnr",
                "pnr_certified", "restart_point"):
        assert result[key] == hand[key], (case["name"], key, result[key], hand[key])
    assert abs(result["concentration"] - hand["concentration"]) < 1e-12, case["name"]
    assert [p["v_fit"] for p in result["points"]] == hand["v_fit"], case["name"]
    if "wilson_2_8" in hand:
        p = next(p for p in result["points"] if p["n"] == 8 and p["successes"] == 2)
        assert abs(p["wilson_lo"] - hand["wilson_2_8"][0]) < 1e-4
        assert abs(p["wilson_hi"] - hand["wilson_2_8"][1]) < 1e-4


# --- coverage ---------------------------------------------------------------------------------------
def features(case: dict, result: dict, debug: dict) -> set[str]:
    f = {f"shape:{result['shape']}"}
    pts = sorted(case["points"])
    length = case["length"]
    if any(n < 8 for (_t, n, _s) in pts):
        f.add("unresolved point")
    if max((n for (_t, n, _s) in pts), default=0) >= 32:
        f.add("n = 32")
    if any(p["v_fit"] != p["v_hat"] for p in result["points"]):
        f.add("PAVA pooling")
    if len(pts) >= 2 and pts[-1][0] == length - 1 and Fraction(pts[-1][2], pts[-1][1]) > Fraction(pts[-2][2], pts[-2][1]):
        f.add("rise at T-1")
    drops = [d for d in debug["drops"] if d > 0]
    if drops and sum(1 for d in drops if d == max(drops)) >= 2:
        f.add("tie between equal drops")
    f.add("pnr certified" if result["pnr_certified"] else "pnr uncertified")
    f.add("onset present" if result["onset"] is not None else "onset absent")
    if case["base"] is None:
        f.add("no base runs")
    else:
        f.add("restart present" if result["restart_point"] is not None else "restart absent")
    if length == 1:
        f.add("T = 1")
    if length >= 120:
        f.add("T = 120")
    if length > case["budget"]:
        f.add("T > budget")
    if case["budget"] != 100:
        f.add("budget != 100")
    if case.get("shuffle"):
        f.add("unsorted CSV rows")
    return f


COVERAGE = [
    "shape:cliff", "shape:erosion", "shape:flat", "unresolved point", "n = 32", "PAVA pooling",
    "rise at T-1", "tie between equal drops", "pnr certified", "pnr uncertified", "onset present",
    "onset absent", "no base runs", "restart present", "restart absent", "T = 1", "T = 120",
    "T > budget", "budget != 100", "unsorted CSV rows",
]


# --- output -----------------------------------------------------------------------------------------
def render(case: dict, rng: random.Random) -> dict[str, str]:
    """File name -> content for one case folder."""
    rows = list(case["points"])
    if case.get("shuffle"):
        rng.shuffle(rows)
    files = {"points.csv": "t,n,successes\n" + "".join(f"{t},{n},{s}\n" for (t, n, s) in rows)}
    if case["base"] is not None:
        files["base.csv"] = "success,steps\n" + "".join(f"{y},{st}\n" for (y, st) in case["base"])
    files["args.json"] = json.dumps({"length": case["length"], "budget": case["budget"]}) + "\n"
    result = estimator.analyze(case["points"], case["length"], case["base"], case["budget"])
    files["expected.json"] = estimator.dumps(result)
    return files


def build() -> tuple[dict[str, dict[str, str]], dict[str, set[str]], dict[str, str]]:
    rng = random.Random(SEED)
    cases = targeted()
    cases += sampled(rng, N_CASES - len(cases))
    assert len(cases) == N_CASES
    shuffle_rng = random.Random(SEED + 1)
    out: dict[str, dict[str, str]] = {}
    feats: dict[str, set[str]] = {}
    notes: dict[str, str] = {}
    for i, case in enumerate(cases, start=1):
        name = f"case_{i:02d}"
        out[name] = render(case, shuffle_rng)
        debug: dict = {}
        result = estimator.analyze(case["points"], case["length"], case["base"], case["budget"], debug)
        feats[name] = features(case, result, debug)
        notes[name] = case["note"]
    for case in hand_cases():
        result = estimator.analyze(case["points"], case["length"], case["base"], case["budget"])
        check_hand(case, result)
        out[case["name"]] = render(case, shuffle_rng)
        notes[case["name"]] = "hand-made, verified by hand in make_heldout.py"
    return out, feats, notes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ap.add_argument("--coverage", action="store_true", help="print the features of every case")
    args = ap.parse_args()
    estimator.selftest()
    out, feats, notes = build()

    covered = set().union(*feats.values())
    missing = [f for f in COVERAGE if f not in covered]
    assert not missing, f"coverage missing: {missing}"
    if args.coverage:
        for name in sorted(feats):
            print(f"{name}: {notes[name]}\n    {', '.join(sorted(feats[name]))}")
        for f in COVERAGE:
            print(f"{f:28s} {sum(f in v for v in feats.values())}")

    if args.check:
        bad = []
        for name, files in out.items():
            for fname, content in files.items():
                path = os.path.join(OUT, name, fname)
                if not os.path.exists(path) or open(path).read() != content:
                    bad.append(path)
        print("check: ok" if not bad else "check: differs:\n  " + "\n  ".join(bad))
        return 1 if bad else 0

    for name, files in out.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        for fname in ("points.csv", "base.csv", "args.json", "expected.json"):
            path = os.path.join(d, fname)
            if fname in files:
                with open(path, "w") as fh:
                    fh.write(files[fname])
            elif os.path.exists(path):
                os.remove(path)
    with open(os.path.join(OUT, "INDEX.md"), "w") as fh:
        fh.write("# Held-out cases (generated by tests/reference/make_heldout.py; do not edit)\n\n")
        for name in sorted(notes):
            fh.write(f"- `{name}`: {notes[name]}\n")
    print(f"wrote {len(out)} cases to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
