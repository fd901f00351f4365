-- Version 3: the start-up record of the releases before versioned migrations is no longer
-- read. Those releases' processes applied their schema texts at start-up and wrote each
-- text's digest here; services/migrate.py reads it once, to recognise such a database as
-- version 1, and `_yoyo_migration` records the versions from then on.
DROP TABLE IF EXISTS schema_applied;
