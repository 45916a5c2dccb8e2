//! `rdv backup create|restore` (SPEC §6.4.1): the agent's key and records
//! in a bundle encrypted under the owner's passphrase, and the restore that
//! opens a new outbound epoch with every contact. The passphrase comes from
//! the terminal without echo, or from a private file; never from an
//! argument or the environment, and it is never printed or logged.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, IsTerminal, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use clap::{Args, Subcommand};
use rdv_agent_core::backup::{self, BACKUP_MAX_BYTES, BACKUP_PASSPHRASE_MIN_CHARS, BackupError};
use rdv_agent_core::record::{Record, Write as RecordWrite};
use rdv_agent_core::restore::{backup_state, restored_records};
use rdv_agent_core::state::ContactStatus;
use rdv_agent_core::{Command, Input};
use rdv_proto::AgentKey;
use rdv_proto::time::{format_time, parse_time};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::agent_cmd::Out;
use crate::cli::Global;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::runtime::{Options, Runtime};
use crate::store::Store;

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Write this agent (its key and its records, without confirm phrases)
    /// to a new file, encrypted under a passphrase (scrypt N=2^17, AES-256-GCM),
    /// then read it back and open it. Whoever holds the file and the
    /// passphrase holds the agent.
    Create(BackupArgs),
    /// Restore an agent from a backup into a home that has none, then send
    /// every contact a restore notice so it re-bases this agent's chain
    /// (SPEC §6.4.1). Stop the old copy first: two copies fork every chain.
    Restore(BackupArgs),
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The backup file.
    pub path: PathBuf,
    /// Read the passphrase from FILE (its one line; not readable by group
    /// or others) instead of the terminal: for scripts and tests.
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

/// Runs `rdv backup …`.
pub async fn run(cmd: BackupCommand, g: &Global, out: &Out) -> Result<()> {
    let home = Home::resolve(g.home.clone(), g.profile.as_deref())?;
    match cmd {
        BackupCommand::Create(a) => create(&a, home, out).await,
        BackupCommand::Restore(a) => restore(&a, home, out).await,
    }
}

fn backup_err(e: &BackupError) -> Error {
    Error::Agent(rdv_agent_core::Error::Backup(e.to_string()))
}

async fn create(a: &BackupArgs, home: Home, out: &Out) -> Result<()> {
    let rt = Runtime::open(home.clone(), Options::default()).await?;
    refuse_existing(&a.path)?;
    let pass = passphrase(a, true, None).await?;
    let records = {
        let mut tx = rt.store().begin().await?;
        tx.load_all().await?
    };
    let seed = home.read_seed()?;
    let id = rt.agent().id().clone();
    let state = backup_state(&records)?;
    let now = time::OffsetDateTime::now_utc();
    let created = now.replace_nanosecond(0).unwrap_or(now);
    let bundle = backup::create(&seed, &id, &state, &pass, created, &mut rand_core::OsRng)
        .map_err(|e| backup_err(&e))?;
    let mut bytes = rdv_proto::canon::to_vec(&bundle)?;
    bytes.push(b'\n');
    write_new(&a.path, &bytes)?;
    // Read back and opened: a backup that does not open is none.
    let check =
        read_bounded(&a.path).and_then(|b| backup::open(&b, &pass).map_err(|e| backup_err(&e)));
    let verified =
        matches!(&check, Ok(o) if o.agent_id == id && *o.seed == *seed && o.state == state);
    if !verified {
        let _ = fs::remove_file(&a.path);
        let why = check.err().map_or_else(String::new, |e| format!(": {e}"));
        return Err(Error::Input(format!(
            "{}: the backup written does not open to this agent{why}; it was removed",
            a.path.display()
        )));
    }
    let contacts = rt
        .agent()
        .state
        .contacts
        .values()
        .filter(|c| c.status == ContactStatus::Active)
        .count();
    out.value(&json!({
        "file": a.path.display().to_string(),
        "id": id,
        "fingerprint": id.fingerprint(),
        "created": format_time(created),
        "contacts": contacts,
        "records": records.len(),
        "verified_agent_id_matches": verified,
    }))
}

async fn restore(a: &BackupArgs, home: Home, out: &Out) -> Result<()> {
    refuse_agent(&home).await?;
    let bytes = read_bounded(&a.path)?;
    let header = backup::inspect(&bytes).map_err(|e| backup_err(&e))?;
    let about = format!(
        "backup of {} ({}), made {}",
        header.agent_id,
        header.agent_id.fingerprint(),
        format_time(header.created)
    );
    let pass = passphrase(a, false, Some(&about)).await?;
    let opened = backup::open(&bytes, &pass).map_err(|e| backup_err(&e))?;
    drop(pass);
    let records = restored_records(&opened.state, &opened.agent_id)?;
    if let Some(warning) = home.create()? {
        eprintln!("rdv: {warning}");
    }
    refuse_agent(&home).await?;
    let db_existed = home.db_path().exists();
    home.write_seed(&opened.seed)?;
    // Nothing half-restored stays behind: a failure here removes the key
    // (and a database this restore created), so the restore can be retried.
    let undo = |home: &Home| {
        let _ = fs::remove_file(home.key_path());
        if !db_existed {
            for side in ["", "-wal", "-shm"] {
                let _ = fs::remove_file(format!("{}{side}", home.db_path().display()));
            }
        }
    };
    let restored = async {
        load_records(&home, &records).await?;
        let mut rt = Runtime::open(home.clone(), Options::default()).await?;
        let c = Command::Restored {
            backup_created: Some(opened.created),
        };
        let o = rt.apply(Input::Command(c)).await?;
        Ok::<_, Error>((rt, o))
    }
    .await;
    let (mut rt, o) = match restored {
        Ok(x) => x,
        Err(e) => {
            undo(&home);
            return Err(e);
        }
    };
    // Committed: the notices are queued. What the relays say now is reported;
    // what they refuse `rdv listen` retries.
    let reply = o.reply.unwrap_or(Value::Null);
    let carried = rt.carry(o.effects).await;
    let queued = &rt.agent().state.deliveries;
    let notices: Vec<Value> = reply["notices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let delivery = match n["delivery"].as_str() {
                None => "failed: no carrier to this contact",
                Some(d) if queued.contains_key(d) => "queued: `rdv listen` retries it",
                Some(_) => "accepted by a relay",
            };
            json!({
                "to": n["to"], "fingerprint": n["fingerprint"], "label": n["label"],
                "seq": n["seq"], "delivery": delivery,
            })
        })
        .collect();
    // §6.4.1: a peer takes what is not newer than the notice for a replay,
    // so nothing more leaves within the notices' second.
    if let Some(after) = reply["send_after"]
        .as_str()
        .and_then(|s| parse_time("send_after", s).ok())
    {
        let wait = after - time::OffsetDateTime::now_utc();
        if wait.is_positive() {
            tokio::time::sleep(wait.unsigned_abs()).await;
        }
    }
    let mut v = json!({
        "id": opened.agent_id,
        "fingerprint": opened.agent_id.fingerprint(),
        "home": home.dir().display().to_string(),
        "backup_created": format_time(opened.created),
        "contacts": reply["contacts"],
        "notices": notices,
    });
    match carried {
        Ok(report) => v["delivery"] = Value::Array(report),
        Err(e) => v["delivery_error"] = json!(e.to_string()),
    }
    out.value(&v)
}

/// §6.4.1: a restore goes only into a home with no agent (nor the
/// database of one).
async fn refuse_agent(home: &Home) -> Result<()> {
    if home.has_agent() {
        let who = home
            .read_seed()
            .map(|s| format!(" ({})", AgentKey::from_seed(*s).id()))
            .unwrap_or_default();
        return Err(Error::Input(format!(
            "{}: this home already has an agent{who}; restore into a new home \
             (--home DIR or --profile NAME)",
            home.dir().display()
        )));
    }
    if home.db_path().exists() {
        let store = Store::open(&home.db_path()).await?;
        let held = {
            let mut tx = store.begin().await?;
            tx.load_all().await?.len()
        };
        store.close().await;
        if held > 0 {
            return Err(Error::Input(format!(
                "{}: holds an agent's database without its key; restore into a new home",
                home.db_path().display()
            )));
        }
    }
    Ok(())
}

/// The backup's records into the home's store, in one transaction.
async fn load_records(home: &Home, records: &[Record]) -> Result<()> {
    let store = Store::open(&home.db_path()).await?;
    let writes: Vec<RecordWrite> = records
        .iter()
        .map(|r| RecordWrite {
            table: r.table,
            key: r.key.clone(),
            value: Some(r.value.clone()),
        })
        .collect();
    {
        let mut tx = store.begin().await?;
        tx.write(&writes).await?;
        tx.commit().await?;
    }
    store.close().await;
    Ok(())
}

fn refuse_existing(path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_ok() {
        return Err(Error::Input(format!(
            "{}: exists; a backup never overwrites a file",
            path.display()
        )));
    }
    Ok(())
}

/// Writes a new file with mode 600, atomically: a temporary file beside
/// it, synced, then linked to `path`, which fails if `path` exists.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| Error::Input(format!("{}: not a file name", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::hard_link(&tmp, path)?;
        fs::remove_file(&tmp)?;
        File::open(dir)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        if e.kind() == ErrorKind::AlreadyExists {
            return refuse_existing(path);
        }
        return Err(Error::Input(format!(
            "{}: cannot write the backup: {e}",
            path.display()
        )));
    }
    Ok(())
}

fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    let f = File::open(path)
        .map_err(|e| Error::Input(format!("{}: cannot open the backup: {e}", path.display())))?;
    let mut buf = Vec::new();
    f.take(BACKUP_MAX_BYTES as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > BACKUP_MAX_BYTES {
        return Err(Error::Input(format!(
            "{}: over {BACKUP_MAX_BYTES} bytes: not a backup",
            path.display()
        )));
    }
    Ok(buf)
}

/// The passphrase: from `--passphrase-file`, else from the terminal with
/// echo off (twice when `confirm`). `about` is shown before the prompt.
async fn passphrase(
    a: &BackupArgs,
    confirm: bool,
    about: Option<&str>,
) -> Result<Zeroizing<String>> {
    if let Some(f) = &a.passphrase_file {
        return passphrase_file(f);
    }
    if !std::io::stdin().is_terminal() {
        return Err(Error::Input(
            "no passphrase: stdin is not a terminal; use --passphrase-file FILE (mode 600)".into(),
        ));
    }
    if let Some(s) = about {
        eprintln!("rdv: {s}");
    }
    let first = prompt(&format!(
        "Backup passphrase{}: ",
        if confirm {
            format!(" (at least {BACKUP_PASSPHRASE_MIN_CHARS} characters)")
        } else {
            String::new()
        }
    ))
    .await?;
    if confirm {
        if first.trim().chars().count() < BACKUP_PASSPHRASE_MIN_CHARS {
            return Err(backup_err(&BackupError::PassphraseTooShort {
                min: BACKUP_PASSPHRASE_MIN_CHARS,
            }));
        }
        let again = prompt("Same passphrase again: ").await?;
        if *again != *first {
            return Err(Error::Input("the two passphrases differ".into()));
        }
    }
    Ok(first)
}

/// The one line of a passphrase file that only its owner may read.
fn passphrase_file(path: &Path) -> Result<Zeroizing<String>> {
    let bad = |why: String| Error::Input(format!("{}: {why}", path.display()));
    let f = File::open(path).map_err(|e| bad(format!("cannot open the passphrase file: {e}")))?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(bad("the passphrase file is not a regular file".into()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(bad(format!(
            "the passphrase file is open to other users (mode {mode:03o}); chmod 600 {}",
            path.display()
        )));
    }
    let mut buf = Zeroizing::new(Vec::new());
    f.take(4097).read_to_end(&mut buf)?;
    if buf.len() > 4096 {
        return Err(bad("the passphrase file is over 4096 bytes".into()));
    }
    let text =
        std::str::from_utf8(&buf).map_err(|_| bad("the passphrase file is not UTF-8".into()))?;
    let line = match text.strip_suffix('\n') {
        Some(l) => l.strip_suffix('\r').unwrap_or(l),
        None => text,
    };
    if line.contains(['\n', '\r']) {
        return Err(bad("the passphrase file holds more than one line".into()));
    }
    if line.is_empty() {
        return Err(bad("the passphrase file is empty".into()));
    }
    Ok(Zeroizing::new(line.to_string()))
}

/// One line from the terminal with echo off. Ctrl-C puts the terminal back.
async fn prompt(text: &str) -> Result<Zeroizing<String>> {
    let saved = stty(&["-g"])?;
    let saved = saved.trim().to_string();
    eprint!("{text}");
    stty(&["-echo"])?;
    let restore_on_ctrl_c = {
        let saved = saved.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = stty(&[&saved]);
                eprintln!();
                std::process::exit(130);
            }
        })
    };
    let mut line = Zeroizing::new(String::new());
    let read = tokio::task::block_in_place(|| std::io::stdin().read_line(&mut line));
    restore_on_ctrl_c.abort();
    let _ = stty(&[&saved]);
    eprintln!();
    read?;
    let end = line.trim_end_matches(['\n', '\r']).len();
    line.truncate(end);
    Ok(line)
}

/// Runs `stty` on the terminal (stdin); its output.
fn stty(args: &[&str]) -> Result<String> {
    let o = std::process::Command::new("stty")
        .args(args)
        .stdin(Stdio::inherit())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| Error::Input(format!("cannot turn the terminal's echo off (stty): {e}")))?;
    if !o.status.success() {
        return Err(Error::Input(
            "cannot turn the terminal's echo off (stty failed)".into(),
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}
