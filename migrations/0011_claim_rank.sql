-- The claim order of duration-aware dispatch (docs/decisions.md, "Duration-aware dispatch"): a
-- trajectory at the head of it (admitted because a worker slot would idle without it, or by a
-- batch) is claimed in stage order first; the rest by their expected remaining chain, computed
-- when a worker claims from what cannot go stale — the steps of budget its stage has left and
-- its timed sums — at the rates of that moment. Portable SQL, like 0001.
ALTER TABLE trajectories ADD COLUMN head BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trajectories ADD COLUMN remaining_steps BIGINT NOT NULL DEFAULT 0;
