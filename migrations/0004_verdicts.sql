-- The patch cache of docs/method.md §6: one verdict per (study, task, patch). Portable SQL, like 0001.

CREATE TABLE verdicts (
    study          TEXT NOT NULL REFERENCES studies (id),
    task           TEXT NOT NULL,
    patch_sha256   TEXT NOT NULL,
    -- The first verdict: what every later run with the same patch is judged by.
    resolved       BIGINT NOT NULL,
    -- Evaluations of this patch with a verdict: the first, any made concurrently by other
    -- workers before the first was stored, and flake re-checks.
    evaluations    BIGINT NOT NULL DEFAULT 1,
    -- Of those after the first, how many disagreed with it (flakes).
    disagreements  BIGINT NOT NULL DEFAULT 0,
    -- Runs judged from this verdict without an evaluation.
    hits           BIGINT NOT NULL DEFAULT 0,
    created_ms     BIGINT NOT NULL,
    PRIMARY KEY (study, task, patch_sha256)
);

-- Evaluations and base runs name the payload that carries their task (image, working directory,
-- evaluator): the worker fetches it like a trajectory's.
ALTER TABLE jobs ADD COLUMN payload_digest TEXT;

-- Of a verdict's evaluations, the flake re-checks the coordinator asked for (`evaluation` jobs).
ALTER TABLE verdicts ADD COLUMN rechecks BIGINT NOT NULL DEFAULT 0;

-- The task a trajectory is a run of (the patch cache is keyed by task). NULL on trajectories
-- stored before: their task is read from the spec.
ALTER TABLE trajectories ADD COLUMN task TEXT;
