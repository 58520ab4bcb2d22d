-- Files by content, jobs other than continuations, the replay states of trajectories, and
-- progress counters.
-- Portable SQL, like 0001.

-- Uploaded files (curves, recorded trajectories) and trajectory payloads, by SHA-256. Workers
-- fetch a payload by the digest its jobs name; a launch names files by the digest uploaded.
CREATE TABLE files (
    digest      TEXT PRIMARY KEY,          -- SHA-256 of content, lowercase hex
    size        BIGINT NOT NULL,
    content     BYTEA NOT NULL,
    created_ms  BIGINT NOT NULL
);

-- A lease names the payload by digest instead of carrying it.
ALTER TABLE trajectories DROP COLUMN payload_json;
ALTER TABLE trajectories ADD COLUMN payload_digest TEXT;
-- The digest of the recorded run, when the trajectory has one: it is replayed before any
-- continuation runs from it.
ALTER TABLE trajectories ADD COLUMN recorded_digest TEXT;
-- The replay that reproduced every step (anchors, levels), and why a trajectory is
-- non-replayable (step, level, reason, excerpts).
ALTER TABLE trajectories ADD COLUMN replay_json TEXT;
ALTER TABLE trajectories ADD COLUMN non_replayable_json TEXT;

-- Progress without a scan per poll: each trajectory counts its continuations, maintained by the
-- transactions that create and finish them (which lock the trajectory's row anyway). Pending
-- ones are the requested less the finished, the dropped and the leased (counted from a small
-- partial index).
ALTER TABLE trajectories ADD COLUMN n_requested BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN n_done BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN n_retired BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN n_dropped BIGINT NOT NULL DEFAULT 0;
CREATE INDEX continuations_leased_by_study ON continuations (study) WHERE state = 'leased';

-- How each outcome's patch was judged: evaluated | cached | empty_patch.
ALTER TABLE continuations ADD COLUMN judged TEXT;

-- Replays, evaluations and base runs: leased, heartbeated, reported and retried like
-- continuations. Continuations of a dropped (non-replayable) trajectory move to 'dropped'.
CREATE TABLE jobs (
    study            TEXT NOT NULL REFERENCES studies (id),
    kind             TEXT NOT NULL,          -- replay | evaluation | base_run
    subject          TEXT NOT NULL,          -- replay: trajectory id; evaluation, base_run: task
    patch_sha256     TEXT NOT NULL DEFAULT '',   -- evaluation: the patch judged
    seq              BIGINT NOT NULL,        -- evaluation: round (0, 1 = flake re-check); base_run: seed
    state            TEXT NOT NULL,          -- pending | leased | done | retired | dropped
    attempt          BIGINT NOT NULL DEFAULT 0,
    no_outcomes      BIGINT NOT NULL DEFAULT 0,
    worker           TEXT,
    lease_expires_ms BIGINT,
    result_json      TEXT,                   -- the report that finished it
    last_reason      TEXT,
    created_ms       BIGINT NOT NULL,
    done_ms          BIGINT,
    PRIMARY KEY (study, kind, subject, patch_sha256, seq)
);
CREATE INDEX jobs_by_state ON jobs (state, study);
CREATE INDEX jobs_by_worker ON jobs (worker) WHERE state = 'leased';
