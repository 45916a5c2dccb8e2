//! The agent's home and store (§7 persistence): migrations, one transaction
//! per input, rollback on a crash before commit, serialization across
//! processes, the inbox, file modes, the key file and the listener lock.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rdv_agent::Error;
use rdv_agent::home::{Home, valid_profile};
use rdv_agent::store::Store;
use rdv_agent_core::record::{Record, Table, Write};
use serde_json::{Value, json};

fn put(table: Table, key: &str, value: Value) -> Write {
    Write {
        table,
        key: key.to_owned(),
        value: Some(value),
    }
}

fn del(table: Table, key: &str) -> Write {
    Write {
        table,
        key: key.to_owned(),
        value: None,
    }
}

fn rec(table: Table, key: &str, value: Value) -> Record {
    Record {
        table,
        key: key.to_owned(),
        value,
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("agent.db")
}

#[tokio::test]
async fn migrations_run_on_a_new_file_and_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    assert_eq!(store.generation().await.unwrap(), 0);
    let mut tx = store.begin().await.unwrap();
    assert!(tx.load_all().await.unwrap().is_empty());
    tx.write(&[put(Table::Profile, "me", json!({"name": "Ann"}))])
        .await
        .unwrap();
    assert_eq!(tx.commit().await.unwrap(), 1);
    store.close().await;

    // Reopening runs the migrations again: a no-op that keeps the data.
    let store = Store::open(&db(&dir)).await.unwrap();
    assert_eq!(store.generation().await.unwrap(), 1);
    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        tx.load_all().await.unwrap(),
        vec![rec(Table::Profile, "me", json!({"name": "Ann"}))]
    );
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    store.close().await;
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(db(&dir));
    let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', 1, x'00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let err = Store::open(&db(&dir)).await.unwrap_err().to_string();
    assert!(err.contains("newer rdv"), "{err}");
}

#[tokio::test]
async fn writes_put_replace_and_delete_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.write(&[
        put(Table::Contact, "b", json!(1)),
        put(Table::Contact, "a", json!({"x": [1, 2]})),
        put(Table::Seen, "a", json!(true)),
        put(Table::ChannelOut, "gone", json!("soon")),
    ])
    .await
    .unwrap();
    tx.write(&[
        put(Table::Contact, "b", json!(2)),
        del(Table::ChannelOut, "gone"),
        del(Table::ChannelOut, "never-there"),
    ])
    .await
    .unwrap();
    // Reads in the transaction see its own writes.
    assert_eq!(
        tx.load_table(Table::Contact).await.unwrap(),
        vec![
            rec(Table::Contact, "a", json!({"x": [1, 2]})),
            rec(Table::Contact, "b", json!(2)),
        ]
    );
    tx.commit().await.unwrap();

    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        tx.load_all().await.unwrap(),
        vec![
            rec(Table::Contact, "a", json!({"x": [1, 2]})),
            rec(Table::Contact, "b", json!(2)),
            rec(Table::Seen, "a", json!(true)),
        ]
    );
    assert!(tx.load_table(Table::ChannelOut).await.unwrap().is_empty());
    assert_eq!(
        tx.load_table(Table::Seen).await.unwrap(),
        vec![rec(Table::Seen, "a", json!(true))]
    );
}

#[tokio::test]
async fn a_transaction_dropped_before_commit_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.write(&[put(Table::ChannelOut, "peer", json!({"seq": 1}))])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // The crash before commit: the next seq and an inbox event, never committed.
    let mut tx = store.begin().await.unwrap();
    tx.write(&[
        put(Table::ChannelOut, "peer", json!({"seq": 2})),
        put(Table::Delivery, "d1", json!({})),
    ])
    .await
    .unwrap();
    tx.append_inbox(&[json!({"type": "lost"})], "2026-01-01T00:00:00Z")
        .await
        .unwrap();
    drop(tx);
    assert_eq!(store.generation().await.unwrap(), 1);
    assert!(store.inbox_latest(10).await.unwrap().is_empty());
    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.generation().await.unwrap(), 1);
    assert_eq!(
        tx.load_all().await.unwrap(),
        vec![rec(Table::ChannelOut, "peer", json!({"seq": 1}))]
    );
    drop(tx);

    // The process dying mid-transaction: a child that aborts before commit.
    drop(store);
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_helper", "--ignored", "--nocapture"])
        .env(CRASH_DB, db(&dir))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    // SIGABRT: it got past its writes, not a panic before them.
    assert_eq!(status.signal(), Some(6), "{status}");
    let store = Store::open(&db(&dir)).await.unwrap();
    assert_eq!(store.generation().await.unwrap(), 1);
    assert!(store.inbox_latest(10).await.unwrap().is_empty());
    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        tx.load_all().await.unwrap(),
        vec![rec(Table::ChannelOut, "peer", json!({"seq": 1}))]
    );
}

const CRASH_DB: &str = "RDV_TEST_CRASH_DB";

/// Run by `a_transaction_dropped_before_commit_leaves_nothing` in a child
/// process: writes in a transaction, then aborts (no destructor runs).
#[tokio::test]
#[ignore = "a helper the crash test runs in a child process"]
async fn crash_helper() {
    let Some(path) = std::env::var_os(CRASH_DB) else {
        return;
    };
    let store = Store::open(Path::new(&path)).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.write(&[put(Table::ChannelOut, "peer", json!({"seq": 3}))])
        .await
        .unwrap();
    tx.append_inbox(&[json!({"type": "lost"})], "t")
        .await
        .unwrap();
    std::process::abort();
}

#[tokio::test]
async fn generation_increases_by_one_per_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    for want in 1..=5u64 {
        let mut tx = store.begin().await.unwrap();
        assert_eq!(tx.generation().await.unwrap(), want - 1);
        // Even a commit without writes is a new generation.
        if want % 2 == 0 {
            tx.write(&[put(Table::Blocked, "x", json!(want))])
                .await
                .unwrap();
        }
        assert_eq!(tx.commit().await.unwrap(), want);
        assert_eq!(store.generation().await.unwrap(), want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_waits_for_the_first_commit_and_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    // Two handles with their own connections: two processes, as SQLite sees them.
    let first = Store::open(&db(&dir)).await.unwrap();
    let second = Arc::new(Store::open(&db(&dir)).await.unwrap());
    let log = Arc::new(Mutex::new(Vec::<&str>::new()));

    let mut tx = first.begin().await.unwrap();
    tx.write(&[put(Table::ChannelOut, "peer", json!({"seq": 7}))])
        .await
        .unwrap();

    let (asking, asked) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn({
        let (second, log) = (second.clone(), log.clone());
        async move {
            log.lock().unwrap().push("second: begin");
            asking.send(()).unwrap();
            let mut tx = second.begin().await.unwrap();
            log.lock().unwrap().push("second: begun");
            let seen = (tx.generation().await.unwrap(), tx.load_all().await.unwrap());
            tx.commit().await.unwrap();
            seen
        }
    });
    asked.await.unwrap();
    // Room for a begin that does not wait to return; none is asserted on.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the second begin must wait");
    log.lock().unwrap().push("first: commit");
    assert_eq!(tx.commit().await.unwrap(), 1);

    let (generation, records) = waiter.await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["second: begin", "first: commit", "second: begun"]
    );
    assert_eq!(generation, 1);
    assert_eq!(
        records,
        vec![rec(Table::ChannelOut, "peer", json!({"seq": 7}))]
    );
    assert_eq!(first.generation().await.unwrap(), 2);
}

#[tokio::test]
async fn two_transactions_in_one_process_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&db(&dir)).await.unwrap());
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = store.begin().await.unwrap();
            let n = tx.load_table(Table::Profile).await.unwrap().len();
            tx.write(&[put(Table::Profile, &format!("k{i}"), json!(n))])
                .await
                .unwrap();
            tx.commit().await.unwrap()
        }));
    }
    let mut gens = Vec::new();
    for t in tasks {
        gens.push(t.await.unwrap());
    }
    gens.sort_unstable();
    assert_eq!(gens, (1..=8).collect::<Vec<u64>>());
    // Each saw every record committed before it: the counts are 0..8.
    let mut tx = store.begin().await.unwrap();
    let mut seen: Vec<u64> = tx
        .load_all()
        .await
        .unwrap()
        .iter()
        .map(|r| r.value.as_u64().unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..8).collect::<Vec<u64>>());
}

#[tokio::test]
async fn inbox_cursors_increase_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    let mut all = Vec::new();
    for batch in 0..3 {
        let mut tx = store.begin().await.unwrap();
        let events: Vec<Value> = (0..4).map(|i| json!({"batch": batch, "i": i})).collect();
        let cursors = tx
            .append_inbox(&events, "2026-01-01T00:00:00Z")
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(cursors.len(), 4);
        all.extend(cursors.into_iter().zip(events));
    }
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));

    let mut paged = Vec::new();
    let mut cursor = 0;
    loop {
        let page = store.inbox_after(cursor, 5).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 5);
        cursor = page.last().unwrap().0;
        paged.extend(page);
    }
    assert_eq!(paged, all);
    assert_eq!(store.inbox_latest(3).await.unwrap(), all[9..].to_vec());
    assert_eq!(store.inbox_after(u64::MAX, 10).await.unwrap(), vec![]);
}

#[tokio::test]
async fn pruning_keeps_the_newest_and_never_reuses_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_keeping(&db(&dir), 5).await.unwrap();
    let mut last = Vec::new();
    for n in 0..4u64 {
        let mut tx = store.begin().await.unwrap();
        let events: Vec<Value> = (0..3).map(|i| json!(n * 3 + i)).collect();
        last = tx.append_inbox(&events, "t").await.unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(last, vec![10, 11, 12]);
    let kept = store.inbox_after(0, 100).await.unwrap();
    assert_eq!(
        kept,
        (8..=12).map(|c| (c, json!(c - 1))).collect::<Vec<_>>()
    );
    assert_eq!(store.inbox_latest(100).await.unwrap(), kept);

    // Everything pruned, then a new event: its cursor is still new.
    store.close().await;
    let store = Store::open_keeping(&db(&dir), 1).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.append_inbox(&[json!("x")], "t").await.unwrap(), vec![13]);
    tx.commit().await.unwrap();
    assert_eq!(
        store.inbox_after(0, 100).await.unwrap(),
        vec![(13, json!("x"))]
    );
}

#[tokio::test]
async fn an_unknown_table_is_refused_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(db(&dir));
    let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    sqlx::query("INSERT INTO records (tbl, key, value) VALUES ('from_the_future', 'k', '1')")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let mut tx = store.begin().await.unwrap();
    let err = tx.load_all().await.unwrap_err().to_string();
    assert!(
        err.contains("from_the_future") && err.contains("upgrade"),
        "{err}"
    );
    // One table's load does not read the others.
    assert!(tx.load_table(Table::Profile).await.unwrap().is_empty());
}

#[tokio::test]
async fn home_dir_and_database_files_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("nested").join("profile"));
    assert_eq!(home.create().unwrap(), None);
    assert_eq!(mode(home.dir()), 0o700);
    assert_eq!(mode(&dir.path().join("nested")), 0o700);
    let store = Store::open(&home.db_path()).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.write(&[put(Table::Profile, "p", json!(1))])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(mode(&home.db_path()), 0o600);
    let wal = home.dir().join("agent.db-wal");
    assert_eq!(mode(&wal), 0o600);
    store.close().await;

    // An existing database or home that others can read is tightened.
    std::fs::set_permissions(home.db_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(Store::open(&home.db_path()).await.unwrap());
    assert_eq!(mode(&home.db_path()), 0o600);
    std::fs::set_permissions(home.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let warning = home.create().unwrap().unwrap();
    assert!(
        warning.contains("755") && warning.contains("700"),
        "{warning}"
    );
    assert_eq!(mode(home.dir()), 0o700);
    assert_eq!(home.create().unwrap(), None);
}

#[test]
fn key_file_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().join("h"));
    home.create().unwrap();
    assert!(!home.has_agent());
    let err = home.read_seed().unwrap_err().to_string();
    assert!(
        err.contains("agent.key") && err.contains("rdv init"),
        "{err}"
    );

    let seed: [u8; 32] = std::array::from_fn(|i| u8::try_from(i * 7 + 3).unwrap());
    home.write_seed(&seed).unwrap();
    assert!(home.has_agent());
    assert_eq!(mode(&home.key_path()), 0o600);
    let text = std::fs::read_to_string(home.key_path()).unwrap();
    assert_eq!(text, format!("{}\n", hex::encode(seed)));
    assert_eq!(*home.read_seed().unwrap(), seed);
    // No temporary file is left behind.
    let names: Vec<OsString> = std::fs::read_dir(home.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![OsString::from("agent.key")]);

    // Replacing (rdv init --force) is atomic too: a new key, no leftovers.
    home.write_seed(&[0xee; 32]).unwrap();
    assert_eq!(*home.read_seed().unwrap(), [0xee; 32]);
    assert_eq!(mode(&home.key_path()), 0o600);
    assert_eq!(std::fs::read_dir(home.dir()).unwrap().count(), 1);
}

#[test]
fn key_file_open_to_others_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    let seed = [0xab; 32];
    home.write_seed(&seed).unwrap();
    std::fs::set_permissions(home.key_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = home.read_seed().unwrap_err();
    assert!(matches!(err, Error::Home(_)));
    let err = err.to_string();
    assert!(err.contains("agent.key"), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    assert!(err.contains("644"), "{err}");
    assert!(!err.contains("abab"), "never the content: {err}");
    std::fs::set_permissions(home.key_path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(*home.read_seed().unwrap(), seed);
}

#[test]
fn key_file_in_the_wrong_format_is_refused_without_its_content() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    let good = "0123456789abcdef".repeat(4);
    for bad in [
        String::new(),
        good.clone(),
        format!("{}\n", good.to_uppercase()),
        format!("{good}\n\n"),
        format!("{good}0\n"),
        format!("{}\n", &good[..62]),
        format!("{}zz\n", &good[..62]),
        format!(" {good}\n"),
    ] {
        std::fs::write(home.key_path(), &bad).unwrap();
        std::fs::set_permissions(home.key_path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = home.read_seed().unwrap_err().to_string();
        assert!(
            err.contains("agent.key") && err.contains("64 lowercase hex"),
            "{err}"
        );
        assert!(!err.contains("0123456789"), "never the content: {err}");
    }
    std::fs::write(home.key_path(), format!("{good}\n")).unwrap();
    assert_eq!(hex::encode(*home.read_seed().unwrap()), good);
}

#[test]
fn seed_debug_is_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    home.write_seed(&[0x5a; 32]).unwrap();
    let seed = home.read_seed().unwrap();
    let shown = format!("{seed:?} {:?}", Some(&seed));
    assert!(shown.contains("redacted"), "{shown}");
    assert!(!shown.contains("90") && !shown.contains("5a"), "{shown}");
}

#[test]
fn listener_lock_is_exclusive_and_released_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path());
    assert!(!home.listener_running());
    let lock = home.try_lock_listener().unwrap().expect("free");
    assert_eq!(mode(&home.lock_path()), 0o600);
    // A second open of the file, even in this process, does not get it.
    assert!(home.try_lock_listener().unwrap().is_none());
    assert!(home.listener_running());
    // Probing does not take it.
    assert!(home.listener_running());
    drop(lock);
    assert!(!home.listener_running());
    let again = home.try_lock_listener().unwrap();
    assert!(again.is_some());
    assert!(home.try_lock_listener().unwrap().is_none());
}

#[test]
fn profile_names_are_strict() {
    for ok in ["default", "omer", "a", "0", "a-b_c9", &"x".repeat(64)] {
        assert!(valid_profile(ok), "{ok}");
    }
    for bad in [
        "",
        "-a",
        "_a",
        "A",
        "omer.x",
        "a/b",
        "..",
        "a b",
        "é",
        &"x".repeat(65),
    ] {
        assert!(!valid_profile(bad), "{bad}");
        let err = Home::resolve_with(None, Some(bad), |_| None).unwrap_err();
        assert!(matches!(err, Error::Input(_)), "{bad}");
    }
}

#[test]
fn home_resolution_order() {
    let env = |pairs: &[(&str, &str)]| {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |k: &str| m.get(k).cloned()
    };
    let dir = |h: Home| h.dir().to_owned();
    let all = env(&[
        ("HOME", "/u"),
        ("RDV_HOME", "/env-home"),
        ("RDV_PROFILE", "envp"),
    ]);
    assert_eq!(
        dir(Home::resolve_with(Some("/flag".into()), Some("p"), &all).unwrap()),
        PathBuf::from("/flag")
    );
    assert_eq!(
        dir(Home::resolve_with(None, Some("p"), &all).unwrap()),
        PathBuf::from("/env-home")
    );
    let no_home = env(&[("HOME", "/u"), ("RDV_PROFILE", "envp")]);
    assert_eq!(
        dir(Home::resolve_with(None, Some("p"), &no_home).unwrap()),
        PathBuf::from("/u/.rendezvous/p")
    );
    assert_eq!(
        dir(Home::resolve_with(None, None, &no_home).unwrap()),
        PathBuf::from("/u/.rendezvous/envp")
    );
    let bare = env(&[("HOME", "/u"), ("RDV_HOME", ""), ("RDV_PROFILE", "")]);
    assert_eq!(
        dir(Home::resolve_with(None, None, &bare).unwrap()),
        PathBuf::from("/u/.rendezvous/default")
    );
    let bad = env(&[("HOME", "/u"), ("RDV_PROFILE", "Bad")]);
    assert!(Home::resolve_with(None, None, &bad).is_err());
    assert!(matches!(
        Home::resolve_with(None, None, |_| None),
        Err(Error::Home(_))
    ));
}

/// `rdv status` reads the profile and relay health and counts the rest in
/// one snapshot, by a top-level field's JSON value where asked.
#[tokio::test]
async fn a_summary_loads_some_tables_and_counts_others_by_field() {
    use rdv_agent::store::Count;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.write(&[
        put(Table::Profile, "me", json!({"name": "Ann"})),
        put(Table::RelayHealth, "wss://r", json!({"failures": 1})),
        put(Table::Contact, "a", json!({"status": "active"})),
        put(Table::Contact, "b", json!({"status": "revoked"})),
        put(Table::Contact, "c", json!({"status": "active"})),
        put(Table::Outgoing, "o1", json!({"closed": false})),
        put(Table::Outgoing, "o2", json!({"closed": true})),
        put(Table::Outgoing, "o3", json!({"closed": 0})),
        put(Table::Delivery, "d1", json!({})),
    ])
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let s = store
        .summary(
            &[Table::Profile, Table::RelayHealth],
            &[
                Count {
                    table: Table::Contact,
                    filter: Some(("status", json!("active"))),
                },
                Count {
                    table: Table::Outgoing,
                    filter: Some(("closed", json!(false))),
                },
                Count {
                    table: Table::Delivery,
                    filter: None,
                },
                Count {
                    table: Table::Pending,
                    filter: None,
                },
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        s.records,
        vec![
            rec(Table::Profile, "me", json!({"name": "Ann"})),
            rec(Table::RelayHealth, "wss://r", json!({"failures": 1})),
        ]
    );
    // `false` counts the stored false, not a stored 0.
    assert_eq!(s.counts, vec![2, 1, 1, 0]);
}

/// An outcome's transaction (no fsync) is a transaction like any other:
/// serialized with the others, bumping the generation, seen on reopen.
#[tokio::test]
async fn an_outcome_commit_is_kept_and_ordered_with_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir)).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    tx.write(&[put(Table::Delivery, "d1", json!({"n": 1}))])
        .await
        .unwrap();
    assert_eq!(tx.commit().await.unwrap(), 1);
    let mut tx = store.begin_outcome().await.unwrap();
    assert_eq!(tx.generation().await.unwrap(), 1);
    tx.write(&[
        del(Table::Delivery, "d1"),
        put(Table::RelayHealth, "r", json!(1)),
    ])
    .await
    .unwrap();
    assert_eq!(tx.commit().await.unwrap(), 2);
    let mut tx = store.begin().await.unwrap();
    assert_eq!(tx.generation().await.unwrap(), 2);
    drop(tx);
    store.close().await;
    let store = Store::open(&db(&dir)).await.unwrap();
    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        tx.load_all().await.unwrap(),
        vec![rec(Table::RelayHealth, "r", json!(1))]
    );
}
