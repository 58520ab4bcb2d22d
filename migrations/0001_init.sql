-- vcurve coordinator store. Portable SQL: the same schema serves PostgreSQL and the embedded
-- SQLite store. Times are milliseconds since the Unix epoch.

CREATE TABLE studies (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    spec_json    TEXT NOT NULL,            -- the validated spec, curves inlined (for export)
    config_json  TEXT NOT NULL,            -- what scheduling needs: parameters, schedule, runner
    runner_kind  TEXT NOT NULL,
    state        TEXT NOT NULL,            -- running | done | cancelled
    created_ms   BIGINT NOT NULL,
    finished_ms  BIGINT
);

CREATE TABLE trajectories (
    study        TEXT NOT NULL REFERENCES studies (id),
    id           TEXT NOT NULL,
    ord          BIGINT NOT NULL,          -- processing order: position in the spec
    state        TEXT NOT NULL,            -- waiting | running | done | doomed
    stage        TEXT NOT NULL,
    stage_rank   BIGINT NOT NULL,          -- later stages first when claiming work
    admit_order  BIGINT,                   -- admission rank within the study
    plan_json    TEXT NOT NULL,            -- length, labels, controls (set at admission)
    payload_json TEXT NOT NULL,            -- what the agent runner needs of the trajectory
    PRIMARY KEY (study, id)
);
CREATE INDEX trajectories_admission ON trajectories (study, state, ord);

CREATE TABLE continuations (
    study            TEXT NOT NULL,
    trajectory       TEXT NOT NULL,
    series           TEXT NOT NULL,
    t                BIGINT NOT NULL,
    seed             BIGINT NOT NULL,
    state            TEXT NOT NULL,        -- pending | leased | done | retired
    attempt          BIGINT NOT NULL DEFAULT 0,   -- bumped at every dispatch
    no_outcomes      BIGINT NOT NULL DEFAULT 0,
    worker           TEXT,
    lease_expires_ms BIGINT,
    success          BIGINT,               -- 0 / 1 once done
    steps            BIGINT,
    end_type         TEXT,
    patch_sha256     TEXT,
    last_reason      TEXT,                 -- reason of the last no-outcome
    created_ms       BIGINT NOT NULL,
    done_ms          BIGINT,
    PRIMARY KEY (study, trajectory, series, t, seed),
    FOREIGN KEY (study, trajectory) REFERENCES trajectories (study, id)
);
CREATE INDEX continuations_by_state ON continuations (state, study);
CREATE INDEX continuations_by_worker ON continuations (worker) WHERE state = 'leased';
CREATE INDEX continuations_done ON continuations (study, done_ms);

CREATE TABLE workers (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    slots         BIGINT NOT NULL,
    capabilities  TEXT NOT NULL,
    registered_ms BIGINT NOT NULL,
    last_seen_ms  BIGINT NOT NULL
);
