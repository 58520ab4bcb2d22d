-- Continuation durations (docs/decisions.md, "Duration-aware dispatch"): when a job was leased,
-- so its report knows how long it ran; per trajectory the sums its duration estimate reads (the
-- continuations timed, their milliseconds, the step budgets they had) and the expected remaining
-- chain the claim order puts first. Portable SQL, like 0001.
ALTER TABLE continuations ADD COLUMN leased_ms BIGINT;
ALTER TABLE jobs ADD COLUMN leased_ms BIGINT;
ALTER TABLE trajectories ADD COLUMN timed_n BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN timed_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN timed_budget BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN chain_ms BIGINT NOT NULL DEFAULT 0;
-- When a trajectory was admitted and when it ended (store time, ms): its wall-clock chain, which
-- the estimated end of a study with trajectories still waiting adds for the last one admitted.
ALTER TABLE trajectories ADD COLUMN admitted_ms BIGINT;
ALTER TABLE trajectories ADD COLUMN ended_ms BIGINT;
