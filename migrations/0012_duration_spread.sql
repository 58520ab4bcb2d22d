-- Whether a study's continuation durations differ by trajectory (docs/decisions.md,
-- "Duration-aware dispatch"): each trajectory's timed continuations' log milliseconds and their
-- squares, summed, in millionths (integers: the store binds no floating-point values), which a
-- one-way analysis of variance over the study's finished trajectories reads; and the study's
-- verdict, which the claim order reads (1: they do not differ, every trajectory runs at the
-- study's rate). Portable SQL, like 0001.
ALTER TABLE trajectories ADD COLUMN timed_log_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN timed_log_ms_sq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE studies ADD COLUMN rate_pooled BIGINT NOT NULL DEFAULT 0;
