-- A claim walks the running studies' trajectories in claim order and takes each one's pending
-- continuations: with only (state, study) to go by it read every pending row of the study once
-- per trajectory. This index gives a trajectory's pending rows alone.
CREATE INDEX continuations_pending ON continuations (study, trajectory) WHERE state = 'pending';
