-- Studies from tasks (docs/method.md §7): the selection the study set was drawn by, with every choice,
-- its reason and the back-fills made since (`vcurve_method::selection::Selection` as JSON). NULL
-- until every base run is in, and on studies that list their trajectories.
ALTER TABLE studies ADD COLUMN selection_json TEXT;
