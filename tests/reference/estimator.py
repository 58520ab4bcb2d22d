#!/usr/bin/env python3
"""Independent reference implementation of the V-curve estimator (`vcurve analyze`).

Written from docs/method.md sections 2, 3 and 8 only, without reading the Rust code, so that the
held-out fixtures under tests/fixtures/heldout/ test the Rust implementation against a second,
independent reading of the method.

Standard library only. Every quantity that is a ratio of counts (V-hat, the isotonic fit, drops,
concentration, restart values, Fisher p-values) is computed exactly with `fractions.Fraction` and
converted to float only for output, so the reference values are the correctly rounded ones. The
Wilson bounds involve a square root and are computed in float.

Usage:
    python3 estimator.py --points P.csv --length T [--base-runs B.csv] [--budget B]
    python3 estimator.py --selftest
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from fractions import Fraction

# --- parameters (SPEC §8) -------------------------------------------------------------------------
K_SCREEN = 8  # a sampled point with n >= K_SCREEN is resolved
EPSILON_PNR = Fraction(15, 100)  # ε
ALPHA = Fraction(5, 100)  # α
CLIFF_THRESHOLD = Fraction(1, 2)
MU_RESTART = Fraction(10, 100)  # μ
Z_TWO_SIDED = 1.960
Z_ONE_SIDED = 1.645
DEFAULT_BUDGET = 100

# --- tolerances (SPEC §3) -------------------------------------------------------------------------
TOL = Fraction(1, 10**9)  # in favour of meeting a threshold; also the tie window for drops
DROP_EXISTS = Fraction(1, 10**12)  # a drop "exists" when it is > 1e-12


class InputError(Exception):
    pass


# --- statistics -----------------------------------------------------------------------------------
def wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    """Plain Wilson score interval (no continuity correction), clamped to [0, 1]."""
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    # At s = 0 (s = n) the lower (upper) end is exactly 0 (1); float rounding leaves ~1e-17.
    lo = 0.0 if successes == 0 else max(0.0, center - half)
    hi = 1.0 if successes == n else min(1.0, center + half)
    return lo, hi


def fisher_one_sided(s_a: int, n_a: int, s_b: int, n_b: int) -> Fraction:
    """One-sided Fisher exact p-value for V(a) > V(b): P(X >= s_a),
    X ~ Hypergeometric(population n_a + n_b, successes s_a + s_b, draws n_a). Exact."""
    population = n_a + n_b
    k = s_a + s_b
    total = math.comb(population, n_a)
    upper = min(n_a, k)
    num = sum(math.comb(k, x) * math.comb(population - k, n_a - x) for x in range(s_a, upper + 1))
    return Fraction(num, total)


def isotonic_fit(points: list[tuple[int, int, int]], length: int) -> dict[int, Fraction]:
    """Weighted least-squares non-increasing fit by pool-adjacent-violators.

    `points` are (t, n, successes) sorted by t; weights are n, values s/n. The terminal point
    (length, 0) enters with infinite weight: any block pooled with it is exactly 0. Returns the
    fitted value for every sampled t and for the terminal t = length.
    """
    # A block: [sum_successes, sum_n, is_terminal, list_of_t]
    blocks: list[list] = []

    def value(block) -> Fraction:
        if block[2]:
            return Fraction(0)
        return Fraction(block[0], block[1])

    items = [(t, n, s, False) for (t, n, s) in points] + [(length, 0, 0, True)]
    for t, n, s, terminal in items:
        blocks.append([s, n, terminal, [t]])
        # non-increasing: a violation is an earlier block strictly below a later one
        while len(blocks) >= 2 and value(blocks[-2]) < value(blocks[-1]):
            later = blocks.pop()
            earlier = blocks[-1]
            earlier[0] += later[0]
            earlier[1] += later[1]
            earlier[2] = earlier[2] or later[2]
            earlier[3].extend(later[3])
    fit: dict[int, Fraction] = {}
    for block in blocks:
        v = value(block)
        for t in block[3]:
            fit[t] = v
    return fit


# --- the estimator --------------------------------------------------------------------------------
def analyze(
    points: list[tuple[int, int, int]],
    length: int,
    base_runs: list[tuple[int, int]] | None = None,
    budget: int = DEFAULT_BUDGET,
    debug: dict | None = None,
) -> dict:
    """The output object of `vcurve analyze`. `points`: (t, n, successes); `base_runs`:
    (success, steps) or None. If `debug` is a dict it is filled with intermediate values."""
    validate(points, length, base_runs, budget)
    points = sorted(points)
    fit = isotonic_fit(points, length)
    vhat = {t: Fraction(s, n) for (t, n, s) in points}
    counts = {t: (n, s) for (t, n, s) in points}

    out_points = []
    for t, n, s in points:
        lo, hi = wilson(s, n, Z_TWO_SIDED)
        _, upper = wilson(s, n, Z_ONE_SIDED)
        out_points.append(
            {
                "t": t,
                "n": n,
                "successes": s,
                "v_hat": float(vhat[t]),
                "v_fit": float(fit[t]),
                "wilson_lo": lo,
                "wilson_hi": hi,
                "upper_one_sided": upper,
            }
        )

    # Resolved points: sampled with n >= K_SCREEN, then the terminal point.
    resolved = [t for (t, n, _s) in points if n >= K_SCREEN] + [length]
    pairs = list(zip(resolved, resolved[1:]))
    drops = [fit[a] - fit[b] for (a, b) in pairs]

    # Decisive interval: largest drop, ties within TOL go to the earliest.
    best = None
    for i, d in enumerate(drops):
        if d > DROP_EXISTS and (best is None or d > drops[best] + TOL):
            best = i
    if best is None:
        t_star = None
        decisive = None
        concentration = None
        shape = "flat"
    else:
        a, b = pairs[best]
        t_star = a + 1
        decisive = [a, b]
        positive = [d for d in drops if d > 0]
        conc = max(positive) / sum(positive)
        concentration = float(conc)
        shape = "cliff" if conc >= CLIFF_THRESHOLD - TOL else "erosion"

    # Onset: first pair of resolved sampled points (the pair ending at the terminal is not tested).
    onset = None
    onset_interval = None
    fisher_ps = []
    for a, b in pairs:
        if b == length:
            continue
        (n_a, s_a), (n_b, s_b) = counts[a], counts[b]
        p = fisher_one_sided(s_a, n_a, s_b, n_b)
        fisher_ps.append(((a, b), p))
        if onset is None and p < ALPHA + TOL:
            onset = a + 1
            onset_interval = [a, b]

    # Point of no return: earliest resolved t with U(t) <= ε and no later resolved sampled point
    # with V-hat > ε; the terminal point always qualifies.
    pnr = length
    for i, t in enumerate(resolved):
        if t == length:
            break
        n, s = counts[t]
        _, upper = wilson(s, n, Z_ONE_SIDED)
        if upper > float(EPSILON_PNR + TOL):
            continue
        later = [u for u in resolved[i + 1 :] if u != length]
        if any(vhat[u] > EPSILON_PNR + TOL for u in later):
            continue
        pnr = t
        break

    # Restart point: min resolved t with R(B - t) - fit(t) >= μ.
    restart_point = None
    if base_runs:
        n_base = len(base_runs)
        for t in resolved:
            b = budget - t
            r = Fraction(sum(1 for (y, steps) in base_runs if y == 1 and steps <= b), n_base)
            if r - fit[t] >= MU_RESTART - TOL:
                restart_point = t
                break

    if debug is not None:
        debug["fit"] = fit
        debug["resolved"] = resolved
        debug["pairs"] = pairs
        debug["drops"] = drops
        debug["fisher"] = fisher_ps

    return {
        "length": length,
        "points": out_points,
        "t_star": t_star,
        "decisive_interval": decisive,
        "concentration": concentration,
        "shape": shape,
        "onset": onset,
        "onset_interval": onset_interval,
        "pnr": pnr,
        "pnr_certified": pnr < length,
        "restart_point": restart_point,
    }


def validate(points, length, base_runs, budget) -> None:
    if length < 1:
        raise InputError(f"length must be >= 1, got {length}")
    if budget < 1:
        raise InputError(f"budget must be >= 1, got {budget}")
    seen = set()
    for t, n, s in points:
        if not 0 <= t < length:
            raise InputError(f"point t={t} outside 0..{length - 1}")
        if t in seen:
            raise InputError(f"duplicate point t={t}")
        seen.add(t)
        if n < 1:
            raise InputError(f"point t={t}: n must be >= 1, got {n}")
        if not 0 <= s <= n:
            raise InputError(f"point t={t}: successes {s} outside 0..{n}")
    for y, steps in base_runs or []:
        if y not in (0, 1):
            raise InputError(f"base run success must be 0 or 1, got {y}")
        if steps < 0:
            raise InputError(f"base run steps must be >= 0, got {steps}")


# --- I/O ------------------------------------------------------------------------------------------
def read_points(path: str) -> list[tuple[int, int, int]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [(int(r["t"]), int(r["n"]), int(r["successes"])) for r in rows]


def read_base_runs(path: str) -> list[tuple[int, int]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [(int(r["success"]), int(r["steps"])) for r in rows]


def dumps(result: dict) -> str:
    return json.dumps(result, indent=2) + "\n"


# --- self-checks ----------------------------------------------------------------------------------
def selftest() -> None:
    def close(x, y, tol):
        assert abs(x - y) <= tol, (x, y)

    # Wilson one-sided upper bounds quoted in SPEC §3.
    close(wilson(0, 24, Z_ONE_SIDED)[1], 0.1013, 5e-5)
    # s = 1 by hand: p = 1/24, z²/n = 0.112751, center = (0.041667 + 0.056376)/1.112751 = 0.088108,
    # half = 1.645/1.112751 * sqrt(0.0016638 + 0.0011745) = 0.078758 -> 0.16687 (SPEC: 0.167).
    close(wilson(1, 24, Z_ONE_SIDED)[1], 0.16687, 5e-5)
    # n = 24, s = 0 in closed form: center = half = (z²/2n)/(1+z²/n), upper = z²/n / (1+z²/n).
    z2n = Z_ONE_SIDED**2 / 24
    close(wilson(0, 24, Z_ONE_SIDED)[1], z2n / (1 + z2n), 1e-15)
    close(wilson(0, 24, Z_ONE_SIDED)[0], 0.0, 0.0)
    # n = 16, s = 0 certifies (0.1447), n = 15, s = 0 does not (0.1528); n = 8, s = 0 is 0.2528.
    close(wilson(0, 16, Z_ONE_SIDED)[1], 0.14467, 5e-5)
    close(wilson(0, 15, Z_ONE_SIDED)[1], 0.15283, 5e-5)
    close(wilson(0, 8, Z_ONE_SIDED)[1], 0.25278, 5e-5)
    # Two-sided, n = 10, s = 5: 0.5 ± 1.96/(1+0.38416)*sqrt(0.025+0.0096040) = [0.2366, 0.7634].
    lo, hi = wilson(5, 10, Z_TWO_SIDED)
    close(lo, 0.23659, 5e-5)
    close(hi, 0.76341, 5e-5)
    assert wilson(8, 8, Z_TWO_SIDED)[1] == 1.0

    # Fisher, hand-summed over the hypergeometric tail, C(16, 8) = 12870:
    # 8/8 vs 0/8: only x = 8: C(8,8) C(8,0) = 1.
    assert fisher_one_sided(8, 8, 0, 8) == Fraction(1, 12870)
    # 5/8 vs 1/8 (K = 6): x = 5: C(6,5) C(10,3) = 6*120 = 720; x = 6: C(6,6) C(10,2) = 45.
    assert fisher_one_sided(5, 8, 1, 8) == Fraction(765, 12870)  # 0.0594: not significant
    # 6/8 vs 1/8 (K = 7): x = 6: 7*C(9,2) = 252; x = 7: C(9,1) = 9.
    assert fisher_one_sided(6, 8, 1, 8) == Fraction(261, 12870)  # 0.0203: significant
    # 4/8 vs 0/8 (K = 4): x = 4: C(12,4) = 495.
    assert fisher_one_sided(4, 8, 0, 8) == Fraction(495, 12870)  # 0.0385: significant
    # 3/8 vs 0/8 (K = 3): x = 3: C(13,5) = 1287 -> exactly 0.1.
    assert fisher_one_sided(3, 8, 0, 8) == Fraction(1, 10)
    # 0 successes on the tested side: P(X >= 0) = 1.
    assert fisher_one_sided(0, 8, 3, 8) == 1
    # 2/2 vs 0/2 (K = 2, C(4,2) = 6): x = 2: 1 -> 1/6.
    assert fisher_one_sided(2, 2, 0, 2) == Fraction(1, 6)

    # PAVA: a rise is pooled by weight; the terminal never lifts the fit.
    fit = isotonic_fit([(0, 8, 4), (5, 8, 6), (9, 8, 0)], 10)
    assert fit == {0: Fraction(10, 16), 5: Fraction(10, 16), 9: 0, 10: 0}
    fit = isotonic_fit([(0, 8, 3), (1, 32, 18)], 2)  # pooled 21/40 = 0.525
    assert fit[0] == fit[1] == Fraction(21, 40)
    fit = isotonic_fit([(0, 8, 6), (3, 8, 2), (4, 24, 6), (5, 8, 4)], 6)
    # 2/8 < 6/24? equal (0.25) -> no pooling; 6/24 < 4/8 -> pool 10/32; 2/8 < 10/32 -> pool 12/40
    assert fit[3] == fit[4] == fit[5] == Fraction(12, 40) and fit[0] == Fraction(6, 8)

    # PAVA against the min-max formula of the non-increasing isotonic regression,
    # f(i) = min_{j<=i} max_{k>=i} (weighted mean of j..k), on random inputs.
    import random

    rng = random.Random(7)
    for _ in range(300):
        length = rng.randint(1, 12)
        ts = sorted(rng.sample(range(length), rng.randint(0, length)))
        pts = []
        for t in ts:
            n = rng.randint(1, 32)
            pts.append((t, n, rng.randint(0, n)))
        fit = isotonic_fit(pts, length)
        for i in range(len(pts)):
            want = min(
                max(
                    Fraction(sum(p[2] for p in pts[j : k + 1]), sum(p[1] for p in pts[j : k + 1]))
                    for k in range(i, len(pts))
                )
                for j in range(i + 1)
            )
            assert fit[pts[i][0]] == want, (pts, i)
        assert fit[length] == 0

    # SPEC §3 tolerance example: R = 0.625, fitted V = 0.525 -> meets μ = 0.10.
    res = analyze([(0, 8, 3), (1, 32, 18)], 2, base_runs=[(1, 10)] * 5 + [(0, 100)] * 3)
    assert res["restart_point"] == 0, res
    assert 0.625 - 0.525 < 0.1  # the float difference really is below μ

    print("selftest: ok")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points")
    ap.add_argument("--length", type=int)
    ap.add_argument("--base-runs")
    ap.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args(argv)
    if args.selftest:
        selftest()
        return 0
    if args.points is None or args.length is None:
        ap.error("--points and --length are required")
    base = read_base_runs(args.base_runs) if args.base_runs else None
    try:
        result = analyze(read_points(args.points), args.length, base, args.budget)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
