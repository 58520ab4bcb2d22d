-- Admission decided from stored state only, so that any number of coordinators and concurrent
-- leases admit the same way. Portable SQL, like 0001.

-- The next admission rank of the study's trajectories (how many were admitted). Read and
-- advanced only under the study row's lock, by the transaction that admits; the batch rule's
-- in-flight check is made under the same lock. A study stored before goes on after its highest
-- rank.
ALTER TABLE studies ADD COLUMN admitted BIGINT NOT NULL DEFAULT 0;
UPDATE studies SET admitted =
    (SELECT COALESCE(MAX(t.admit_order) + 1, 0) FROM trajectories t WHERE t.study = studies.id);

-- 1: the controls were decided at launch and stored in each trajectory's plan (the first
-- trajectories in spec order that are not doomed, docs/method.md §7). 0: a study stored before, whose
-- trajectories get their controls at admission, by rank.
ALTER TABLE studies ADD COLUMN controls_at_launch BIGINT NOT NULL DEFAULT 0;
