"""Independent reference implementation of the adaptive schedule (docs/method.md §4),
the estimator of docs/method.md §3 as far as the synthetic benchmark needs it, and the
synthetic curve families of issue 3.

Plain Python 3.11 standard library only. Written from docs/method.md and the issue text
alone, without reading the Rust implementation, so that the two can be compared.

The schedule is written as straight-line code per trajectory: since stages run
in order and every outcome of a stage is known before the next one starts, a
sequential simulation with a fixed outcome source for every key
(t, seed index) gives exactly what a barrier-synchronised state machine gives.

Decisions where docs/method.md §4 / issue 3 leave room (each is a parameter or a
flag of schedule_bench.py where an alternative was worth measuring):
  1. Tolerance: every threshold comparison allows TOL = 1e-9 in favour of
     meeting it (bisect selection >= 0.25, second confirm >= 0.25, Wilson U <= 0.15,
     C >= 0.5, Fisher p < 0.05, later raw V-hat <= 0.15 in the PNR rule,
     true big cliff >= 0.4).  Ties between drops (bisection halves, pair ranking,
     decisive interval) are "equal" within TOL and go to the earliest.
  2. Bisect: the candidate pairs are consecutive anchors plus (T-1, T); at most 3
     with raw drop >= 0.25, largest first; the terminal pair occupies a slot even
     though it needs no sampling.  Midpoints are raised to K = 8.
  3. Confirm: the pairs that compete are the pairs the bisection stage worked on
     (all at b - a = 1 when it ends), not every pair of adjacent sampled points
     (`confirm_pairs="bisected"`; `"adjacent"` is the alternative, measured in
     the report: differences <= 0.02 on every rate).  No pair bisected -> nothing
     confirmed.  The largest is raised to 32 whatever its drop; the second only if
     its drop, recomputed after the first's confirmation (they may share an end),
     is >= 0.25.  Ranking is on raw V-hat with V-hat(T) = 0.
  4. PNR: an anchor with no success is raised to 24; it certifies iff it still has
     no success and U <= 0.15 (always true at n >= 24 with s = 0).  Backward
     bisection starts from the latest t < anchor with n > 0 and s > 0 (any stage);
     midpoint raised to 8, then to 24 if still no success; certified -> upper end.
     No earlier success -> stage ends at the anchor.  No anchor certifies -> stage
     ends.
  5. screen-k4: screening anchors at K = 4; bisection midpoints stay at K = 8,
     confirm 32, PNR 24/8 ("the rest as paper"); the estimator's resolution
     threshold becomes 4 (so the K = 4 anchors are resolved).
  6. sparse-anchors: {0, 10, 20, ...} plus T - 1, all < T.
  7. Estimator: the fit uses every sampled point plus (T, 0) with infinite weight;
     "no drop at all" means no fitted drop > TOL between consecutive resolved
     points -> shape flat, no t-hat*.  Onset Fisher test is one-sided
     (hypergeometric upper tail) on the raw counts of consecutive resolved points,
     the pair ending at T excluded.
  8. Truth: true t* = argmax_t V(t-1) - V(t) over t = 1..T (earliest on ties);
     this includes the terminal step, so a flat curve has t* = T and true largest
     drop p0, and flat curves with p0 >= 0.4 are "big cliffs" ("curves of any
     family").  Erosion: positions fixed, weights redrawn until every size <
     0.5 p0 (strict); V is set to exactly 0 from the last drop position on.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

TOL = 1e-9

# docs/method.md §8 parameters used here
K_SCREEN = 8
DELTA_SCREEN = 0.25
MAX_BISECT = 3
K_BISECT = 8
K_CONFIRM = 32
SECOND_DROP_MIN = 0.25
K_PNR = 24
K_PNR_MID = 8
EPS = 0.15
CLIFF_C = 0.5
ALPHA = 0.05
Z_ONE_SIDED = 1.645
Z_TWO_SIDED = 1.960


# ---------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------

def wilson_upper(s: int, n: int, z: float = Z_ONE_SIDED) -> float:
    """Upper end of the plain Wilson score interval (one-sided with z=1.645)."""
    if n <= 0:
        return 1.0
    p = s / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = p + z2 / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (centre + half) / denom


def fisher_one_sided_greater(s_a: int, n_a: int, s_b: int, n_b: int) -> float:
    """One-sided Fisher exact p-value for H1: rate(a) > rate(b).

    P(X >= s_a) with X hypergeometric: population n_a+n_b, s_a+s_b successes,
    n_a draws.
    """
    N = n_a + n_b
    K = s_a + s_b
    total = math.comb(N, n_a)
    hi = min(n_a, K)
    num = 0
    for x in range(s_a, hi + 1):
        if n_a - x > N - K:
            continue
        num += math.comb(K, x) * math.comb(N - K, n_a - x)
    return num / total


def pava_nonincreasing(ys: List[float], ws: List[float]) -> List[float]:
    """Weighted isotonic (non-increasing) least-squares fit by PAVA.

    Weights may be math.inf: a block containing an infinite-weight point takes
    that point's value (the mean of the infinite-weight values in the block).
    """
    # blocks: [finite_sum, finite_weight, inf_sum, inf_count, length]
    blocks: List[List[float]] = []

    def value(b):
        if b[3] > 0:
            return b[2] / b[3]
        return b[0] / b[1]

    for y, w in zip(ys, ws):
        if math.isinf(w):
            b = [0.0, 0.0, y, 1, 1]
        else:
            b = [y * w, w, 0.0, 0, 1]
        blocks.append(b)
        # non-increasing: violation when the previous block is below the new one
        while len(blocks) >= 2 and value(blocks[-2]) < value(blocks[-1]):
            last = blocks.pop()
            prev = blocks[-1]
            prev[0] += last[0]
            prev[1] += last[1]
            prev[2] += last[2]
            prev[3] += last[3]
            prev[4] += last[4]
    out: List[float] = []
    for b in blocks:
        v = value(b)
        out.extend([v] * int(b[4]))
    return out


# ---------------------------------------------------------------------------
# schedule
# ---------------------------------------------------------------------------

def paper_anchors(T: int) -> List[int]:
    a = {0}
    a.update(range(5, 51, 5))
    a.update(range(60, T, 10))
    a.add(T - 1)
    return sorted(t for t in a if 0 <= t < T)


def sparse_anchors(T: int) -> List[int]:
    a = set(range(0, T, 10))
    a.add(T - 1)
    return sorted(t for t in a if 0 <= t < T)


@dataclass
class Variant:
    name: str
    anchors: Callable[[int], List[int]] = paper_anchors
    k_screen: int = K_SCREEN          # K used at the screening anchors
    k_resolved: int = K_SCREEN        # n >= this makes a point resolved (estimator)
    k_bisect: int = K_BISECT          # K at bisection midpoints
    confirm: bool = True
    pnr: bool = True
    # which pairs compete in the confirmation stage:
    #   "bisected": the (up to 3) pairs the bisection stage worked on, now adjacent
    #   "adjacent": every pair of consecutive sampled points (terminal included)
    #               that are one step apart
    confirm_pairs: str = "bisected"


VARIANTS: Dict[str, Variant] = {
    "paper": Variant("paper"),
    "screen-bisect": Variant("screen-bisect", confirm=False, pnr=False),
    # Decision: for screen-k4 the resolution threshold is the screening K (4);
    # bisection midpoints stay at K = 8 ("the rest as paper").
    "screen-k4": Variant("screen-k4", k_screen=4, k_resolved=4),
    "sparse-anchors": Variant("sparse-anchors", anchors=sparse_anchors),
}


class Trajectory:
    """Counts per point for one simulated trajectory.

    `outcome(t, j)` gives the outcome (0/1) of continuation seed j at point t;
    raising a point to K runs seeds n..K-1 (cumulative, never re-run).
    """

    def __init__(self, T: int, outcome: Callable[[int, int], int]):
        self.T = T
        self.outcome = outcome
        self.n: Dict[int, int] = {}
        self.s: Dict[int, int] = {}
        self.stage_cost: Dict[str, int] = {}
        self.stage = "screen"

    def raise_to(self, t: int, K: int) -> None:
        assert 0 <= t < self.T, "the terminal point is never sampled"
        n = self.n.get(t, 0)
        if n >= K:
            return
        s = self.s.get(t, 0)
        for j in range(n, K):
            s += self.outcome(t, j)
        self.n[t] = K
        self.s[t] = s
        self.stage_cost[self.stage] = self.stage_cost.get(self.stage, 0) + (K - n)

    def vhat(self, t: int) -> float:
        if t == self.T:
            return 0.0
        return self.s[t] / self.n[t]

    def drop(self, a: int, b: int) -> float:
        return self.vhat(a) - self.vhat(b)

    @property
    def total(self) -> int:
        return sum(self.n.values())


def run_schedule(T: int, outcome: Callable[[int, int], int], variant: Variant) -> Trajectory:
    tr = Trajectory(T, outcome)
    anchors = variant.anchors(T)

    # 1. screen
    tr.stage = "screen"
    for t in anchors:
        tr.raise_to(t, variant.k_screen)

    # 2. bisect
    tr.stage = "bisect"
    pairs = [(anchors[i], anchors[i + 1]) for i in range(len(anchors) - 1)]
    pairs.append((T - 1, T))
    cand = [(tr.drop(a, b), a, b) for a, b in pairs if tr.drop(a, b) >= DELTA_SCREEN - TOL]
    cand = _rank_desc(cand)[:MAX_BISECT]
    bracketed: List[Tuple[int, int]] = []
    for _, a, b in cand:
        while b - a > 1:
            m = (a + b) // 2
            tr.raise_to(m, variant.k_bisect)
            d_left = tr.drop(a, m)
            d_right = tr.drop(m, b)
            if d_right > d_left + TOL:
                a = m
            else:  # larger drop on the left, or a tie: the earlier half
                b = m
        bracketed.append((a, b))

    # 3. confirm
    if variant.confirm:
        tr.stage = "confirm"
        if variant.confirm_pairs == "bisected":
            cpairs = sorted(bracketed)
        elif variant.confirm_pairs == "adjacent":
            pts = sorted(tr.n) + [T]
            cpairs = [(a, b) for a, b in zip(pts, pts[1:]) if b - a == 1]
        else:
            raise ValueError(variant.confirm_pairs)
        ranked = _rank_desc([(tr.drop(a, b), a, b) for a, b in cpairs])
        if ranked:
            _, a, b = ranked[0]
            for t in (a, b):
                if t < T:
                    tr.raise_to(t, K_CONFIRM)
            if len(ranked) > 1:
                _, a2, b2 = ranked[1]
                if tr.drop(a2, b2) >= SECOND_DROP_MIN - TOL:
                    for t in (a2, b2):
                        if t < T:
                            tr.raise_to(t, K_CONFIRM)

    # 4. point of no return
    if variant.pnr:
        tr.stage = "pnr"
        _pnr_stage(tr, anchors)

    tr.stage = "done"
    return tr


def _certifies(tr: Trajectory, t: int) -> bool:
    return tr.s[t] == 0 and wilson_upper(0, tr.n[t]) <= EPS + TOL


def _pnr_stage(tr: Trajectory, anchors: List[int]) -> None:
    for t in anchors:
        if tr.s.get(t, 0) > 0:
            continue
        tr.raise_to(t, K_PNR)
        if not _certifies(tr, t):
            continue  # go on to the next anchor with no success
        earlier = [u for u in tr.n if u < t and tr.s[u] > 0]
        if not earlier:
            return  # the anchor itself ends the search
        lo, hi = max(earlier), t
        while hi - lo > 1:
            m = (lo + hi) // 2
            tr.raise_to(m, K_PNR_MID)
            if tr.s[m] == 0:
                tr.raise_to(m, K_PNR)
            if _certifies(tr, m):
                hi = m
            else:
                lo = m
        return


def _rank_desc(items: List[Tuple[float, int, int]]) -> List[Tuple[float, int, int]]:
    """Sort (drop, a, b) by drop descending; drops within TOL tie -> earliest a first."""
    items = sorted(items, key=lambda x: x[1])  # by position
    out: List[Tuple[float, int, int]] = []
    # stable selection sort honouring the tolerance
    rest = list(items)
    while rest:
        best = 0
        for i in range(1, len(rest)):
            if rest[i][0] > rest[best][0] + TOL:
                best = i
        out.append(rest.pop(best))
    return out


# ---------------------------------------------------------------------------
# estimator (docs/method.md §3)
# ---------------------------------------------------------------------------

@dataclass
class Estimate:
    fit: Dict[int, float]
    resolved: List[int]
    decisive: Optional[Tuple[int, int]]
    t_star: Optional[int]
    C: Optional[float]
    shape: str  # "cliff" | "erosion" | "flat"
    onset: Optional[Tuple[int, int]]
    t_on: Optional[int]
    t_pnr: int


def estimate(n: Dict[int, int], s: Dict[int, int], T: int, k_resolved: int = K_SCREEN) -> Estimate:
    pts = sorted(t for t in n if n[t] > 0 and t < T)
    ys = [s[t] / n[t] for t in pts] + [0.0]
    ws = [float(n[t]) for t in pts] + [math.inf]
    fitted = pava_nonincreasing(ys, ws)
    fit = dict(zip(pts + [T], fitted))

    resolved = [t for t in pts if n[t] >= k_resolved] + [T]
    drops = [(fit[a] - fit[b], a, b) for a, b in zip(resolved, resolved[1:])]

    pos = [d for d, _, _ in drops if d > TOL]
    if not pos:
        decisive = None
        t_star = None
        C = None
        shape = "flat"
    else:
        best = None
        for d, a, b in drops:
            if best is None or d > best[0] + TOL:
                best = (d, a, b)
        decisive = (best[1], best[2])
        t_star = best[1] + 1
        C = best[0] / sum(pos)
        shape = "cliff" if C >= CLIFF_C - TOL else "erosion"

    onset = None
    for a, b in zip(resolved, resolved[1:]):
        if b == T:
            continue
        p = fisher_one_sided_greater(s[a], n[a], s[b], n[b])
        if p < ALPHA + TOL:
            onset = (a, b)
            break
    t_on = onset[0] + 1 if onset else None

    t_pnr = T
    for i, t in enumerate(resolved):
        if t == T:
            break
        if wilson_upper(s[t], n[t]) > EPS + TOL:
            continue
        later_ok = all(s[u] / n[u] <= EPS + TOL for u in resolved[i + 1:] if u != T)
        if later_ok:
            t_pnr = t
            break

    return Estimate(fit, resolved, decisive, t_star, C, shape, onset, t_on, t_pnr)


# ---------------------------------------------------------------------------
# synthetic families (issue 3, item 3)
# ---------------------------------------------------------------------------

FAMILIES = ["plateau_cliff", "cliff", "erosion", "flat"]


@dataclass
class Curve:
    family: str
    T: int
    p0: float
    V: List[float]  # V[0..T], V[T] == 0
    true_t_star: int = 0
    true_drop: float = 0.0
    true_shape: Optional[str] = None  # None for flat
    meta: dict = field(default_factory=dict)


def make_curve(family: str, rng: random.Random) -> Curve:
    T = rng.randint(40, 100)
    p0 = rng.uniform(0.25, 1.0)
    V = [0.0] * (T + 1)
    meta: dict = {}
    if family == "plateau_cliff":
        ts = rng.randint(1, T - 2)
        for t in range(T):
            V[t] = p0 if t < ts else 0.0
        meta["t_star"] = ts
    elif family == "cliff":
        ts = rng.randint(1, T - 2)
        d = rng.uniform(0.5 * p0, p0)
        t_end = min(T - 1, ts + rng.randint(5, 30))
        rem = p0 - d
        for t in range(T):
            if t < ts:
                V[t] = p0
            elif t <= t_end:
                V[t] = rem * (t_end - t) / (t_end - ts)
            else:
                V[t] = 0.0
        meta.update(t_star=ts, d=d, t_end=t_end)
    elif family == "erosion":
        k = rng.randint(4, 10)
        positions = rng.sample(range(1, T), k)
        while True:
            w = [rng.uniform(0.0, 1.0) for _ in range(k)]
            sw = sum(w)
            if sw <= 0:
                continue
            sizes = [p0 * wi / sw for wi in w]
            if all(x < 0.5 * p0 for x in sizes):
                break
        last = max(positions)
        for t in range(T):
            if t >= last:
                V[t] = 0.0
            else:
                V[t] = max(0.0, p0 - sum(sz for pos, sz in zip(positions, sizes) if pos <= t))
        meta.update(positions=positions, sizes=sizes)
    elif family == "flat":
        for t in range(T):
            V[t] = p0
    else:
        raise ValueError(family)
    V[T] = 0.0

    best_t, best_d = 1, V[0] - V[1]
    for t in range(2, T + 1):
        d = V[t - 1] - V[t]
        if d > best_d:  # earliest on ties
            best_t, best_d = t, d
    if family == "flat":
        shape = None
    else:
        shape = "cliff" if best_d >= 0.5 * p0 - TOL else "erosion"
    return Curve(family, T, p0, V, best_t, best_d, shape, meta)


def bernoulli_source(V: List[float], base_seed: str) -> Callable[[int, int], int]:
    """Outcome of continuation seed j at point t: Bernoulli(V[t]).

    Uniforms are drawn per point from a stream seeded by (base_seed, t), so the
    same key gives the same outcome whatever the schedule variant asks for
    (common random numbers across variants).
    """
    streams: Dict[int, Tuple[random.Random, List[float]]] = {}

    def outcome(t: int, j: int) -> int:
        st = streams.get(t)
        if st is None:
            st = (random.Random(f"{base_seed}:t{t}"), [])
            streams[t] = st
        rng, us = st
        while len(us) <= j:
            us.append(rng.random())
        return 1 if us[j] < V[t] else 0

    return outcome
