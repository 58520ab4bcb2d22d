"""Synthetic benchmark of the adaptive schedule (issue 3, item 4), reference side.

Usage:
  python3 schedule_bench.py [--per-family N] [--seed S] [--schedule NAME|all]
                            [--out PATH] [--workers W] [--confirm-pairs bisected|adjacent]
                            [--k4-bisect K] [--k4-resolved K]

Writes a JSON list `[{"schedule": name, "families": {family: {...}}}, ...]` and
prints a table. Plain standard library; uses multiprocessing for speed.

Metric definitions (issue 3 item 4, with the readings chosen here):
  shape_accuracy   share of curves whose estimated shape equals the true shape
                   (estimated "flat" counts as wrong); null for the flat family.
  cliff_share      share estimated "cliff".
  drop_found       some pair (t, t+1) with t+1 < T and both ends at n >= 32 has
                   raw V-hat(t) - V-hat(t+1) >= 0.25 (so always 0 for screen-bisect).
  onset_found      the estimator reports an onset (one-sided Fisher p < 0.05 on
                   consecutive resolved points, pair ending at T excluded).
  pnr_certified    t_pnr < T.
  continuations_*  total continuations per curve over all stages; median is the
                   usual median (mean of the two middle values); p90 interpolates
                   linearly between closest ranks (numpy's default).
  big_cliff_*      curves of the family whose true largest drop (terminal step
                   included) is >= 0.4; error |t-hat* - t*|, infinite when the
                   estimator finds no drop; within_one = share with error <= 1.
  extra            diagnostics only: mean continuations per stage, exact-t* shares.

Curves and continuation outcomes depend only on (seed, family, curve index) and
(point t, seed index j), so every variant sees the same curves and, for the same
key, the same outcome.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import schedule as S  # noqa: E402

BIG_CLIFF = 0.4
DROP_FOUND_MIN = 0.25


def simulate_one(args):
    variant_name, family, i, seed, overrides = args
    v = S.VARIANTS[variant_name]
    if overrides:
        # --k4-* overrides only touch screen-k4; --confirm-pairs touches every variant
        ov = {k: val for k, val in overrides.items()
              if k == "confirm_pairs" or variant_name == "screen-k4"}
        v = replace(v, **ov)
    curve = S.make_curve(family, random.Random(f"{seed}:{family}:{i}"))
    outcome = S.bernoulli_source(curve.V, f"{seed}:{family}:{i}:out")
    tr = S.run_schedule(curve.T, outcome, v)
    est = S.estimate(tr.n, tr.s, curve.T, v.k_resolved)

    T = curve.T
    drop_found = False
    for t, n in tr.n.items():
        if t + 1 < T and n >= S.K_CONFIRM and tr.n.get(t + 1, 0) >= S.K_CONFIRM:
            if tr.vhat(t) - tr.vhat(t + 1) >= DROP_FOUND_MIN - S.TOL:
                drop_found = True
                break
    return {
        "T": T,
        "p0": curve.p0,
        "true_t_star": curve.true_t_star,
        "true_drop": curve.true_drop,
        "true_shape": curve.true_shape,
        "shape": est.shape,
        "t_star": est.t_star,
        "t_pnr": est.t_pnr,
        "onset": est.onset is not None,
        "drop_found": drop_found,
        "continuations": tr.total,
        "stage_cost": dict(tr.stage_cost),
    }


def percentile_linear(xs, q):
    """Linear interpolation between closest ranks (numpy's default 'linear')."""
    xs = sorted(xs)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(family, recs):
    n = len(recs)
    out = {"curves": n}
    if family == "flat":
        out["shape_accuracy"] = None
    else:
        out["shape_accuracy"] = sum(r["shape"] == r["true_shape"] for r in recs) / n
    out["cliff_share"] = sum(r["shape"] == "cliff" for r in recs) / n
    out["drop_found"] = sum(r["drop_found"] for r in recs) / n
    out["onset_found"] = sum(r["onset"] for r in recs) / n
    out["pnr_certified"] = sum(r["t_pnr"] < r["T"] for r in recs) / n
    cont = [r["continuations"] for r in recs]
    out["continuations_mean"] = statistics.fmean(cont)
    out["continuations_median"] = statistics.median(cont)
    out["continuations_p90"] = percentile_linear(cont, 0.9)
    big = [r for r in recs if r["true_drop"] >= BIG_CLIFF - S.TOL]
    out["big_cliff_n"] = len(big)
    if big:
        errs = [abs(r["t_star"] - r["true_t_star"]) if r["t_star"] is not None else math.inf
                for r in big]
        out["big_cliff_median_abs_error"] = statistics.median(errs)
        out["big_cliff_within_one"] = sum(e <= 1 for e in errs) / len(big)
    else:
        out["big_cliff_median_abs_error"] = None
        out["big_cliff_within_one"] = None
    # extra diagnostics (not part of the list)
    stages = ["screen", "bisect", "confirm", "pnr"]
    out["extra"] = {
        "stage_continuations_mean": {
            st: statistics.fmean(r["stage_cost"].get(st, 0) for r in recs) for st in stages
        },
        "t_star_exact_all": (sum(r["t_star"] == r["true_t_star"] for r in recs) / n),
        "big_cliff_exact": (sum(r["t_star"] == r["true_t_star"] for r in big) / len(big)) if big else None,
        "estimated_flat_share": sum(r["shape"] == "flat" for r in recs) / n,
    }
    return out


FIELDS = ["curves", "shape_accuracy", "cliff_share", "drop_found", "onset_found", "pnr_certified",
          "continuations_mean", "continuations_median", "continuations_p90", "big_cliff_n",
          "big_cliff_median_abs_error", "big_cliff_within_one"]


RATE_FIELDS = {"shape_accuracy", "cliff_share", "drop_found", "onset_found", "pnr_certified",
               "big_cliff_within_one"}


def fmt(v, field=""):
    if v is None:
        return "-"
    if field in RATE_FIELDS:
        return f"{v:.3f}"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return str(int(v)) if v.is_integer() else f"{v:.1f}"
    return str(v)


def print_table(results, file=sys.stdout):
    short = {"curves": "curves", "shape_accuracy": "shape_acc", "cliff_share": "cliff_sh",
             "drop_found": "drop_fnd", "onset_found": "onset", "pnr_certified": "pnr_cert",
             "continuations_mean": "cont_mean", "continuations_median": "cont_med",
             "continuations_p90": "cont_p90", "big_cliff_n": "big_n",
             "big_cliff_median_abs_error": "big_mae", "big_cliff_within_one": "big_w1"}
    hdr = ["schedule", "family"] + [short[f] for f in FIELDS]
    rows = []
    for res in results:
        for fam, m in res["families"].items():
            rows.append([res["schedule"], fam] + [fmt(m[f], f) for f in FIELDS])
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    line = lambda r: "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"
    print(line(hdr), file=file)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=file)
    for r in rows:
        print(line(r), file=file)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-family", type=int, default=1000)
    ap.add_argument("--seed", default="20240603")
    ap.add_argument("--schedule", default="all")
    ap.add_argument("--out", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--confirm-pairs", default=None, choices=["bisected", "adjacent"])
    ap.add_argument("--k4-bisect", type=int, default=None)
    ap.add_argument("--k4-resolved", type=int, default=None)
    args = ap.parse_args(argv)

    names = list(S.VARIANTS) if args.schedule == "all" else [args.schedule]
    overrides = {}
    if args.confirm_pairs:
        overrides["confirm_pairs"] = args.confirm_pairs
    if args.k4_bisect:
        overrides["k_bisect"] = args.k4_bisect
    if args.k4_resolved:
        overrides["k_resolved"] = args.k4_resolved

    t0 = time.time()
    jobs = [(v, fam, i, args.seed, overrides)
            for v in names for fam in S.FAMILIES for i in range(args.per_family)]
    if args.workers > 1:
        with mp.Pool(args.workers) as pool:
            recs = pool.map(simulate_one, jobs, chunksize=200)
    else:
        recs = [simulate_one(j) for j in jobs]

    results = []
    k = 0
    for v in names:
        fams = {}
        for fam in S.FAMILIES:
            chunk = recs[k:k + args.per_family]
            k += args.per_family
            fams[fam] = summarize(fam, chunk)
        results.append({"schedule": v, "families": fams})

    if args.out:
        meta = {"seed": args.seed, "per_family": args.per_family, "overrides": overrides}
        for r in results:
            r["params"] = meta
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    print_table(results)
    print(f"# {len(jobs)} curves in {time.time() - t0:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
