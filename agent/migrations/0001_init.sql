-- The agent's state (SPEC §7 persistence). The core's state is records,
-- opaque JSON by (table, key); every input's writes, its inbox events and
-- the generation bump commit in one transaction before its effects leave.
CREATE TABLE records (
    tbl TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (tbl, key)
) WITHOUT ROWID;

-- Events for the human and the host, append-only. AUTOINCREMENT: a cursor
-- is never reused, even after the oldest rows are pruned, so a reader's
-- saved cursor never skips or repeats an event.
CREATE TABLE inbox (
    cursor INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    event TEXT NOT NULL
);

-- `generation`: bumped by every commit, so a process can tell that another
-- one changed the state since it last loaded it.
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('generation', '0');
