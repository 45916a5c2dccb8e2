//! `rdv file …` (SPEC §7.7): prepare a file of yours for a task (encrypted
//! under a fresh key, the copy to upload written out; nothing is sent),
//! list files, fetch a task's files into the quarantine, and the
//! direct-transfer setting (only you change it, at your terminal).
//!
//! A prepared file is kept in the home (`files/prepared/<sha256>.json`,
//! mode 600: it holds the file's key) until `rdv task submit --file`
//! attaches it; it then leaves only through the release gate.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;
use rdv_agent_core::Command;
use rdv_agent_core::file::{
    DirectTransferSetting, FileCommand, FileMeta, FilePart, inline_part, reference_part,
};
use rdv_agent_core::peer_text::{UntrustedPeerText, terminal_safe};
use rdv_agent_core::task::{OwnFile, Role, Task};
use rdv_proto::consts::{A2A_INLINE_FILE_MAX_BYTES, FILES_FETCH_MAX_BYTES, FILES_QUARANTINE_DIR};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cli::Global;
use crate::dns::Dns;
use crate::error::{Error, Result};
use crate::fetch::{AddressPolicy, DnsResolve, Fetcher, quarantine_name, save_quarantined};
use crate::home::Home;
use crate::runtime::{Options, Runtime};

/// Where prepared files are kept in the home.
pub const PREPARED_DIR: &str = "files/prepared";
/// Fetched text at most this long is shown, marked as peer text (§7.7).
pub const SHORT_TEXT_MAX_BYTES: usize = 2000;

#[derive(Debug, Subcommand)]
pub enum FileCommandArgs {
    /// Prepare a file of yours to attach to a task: encrypted under a
    /// fresh key (or --inline, up to 16 KiB, inside the envelope). Writes
    /// the encrypted copy to upload; nothing is sent. Paths inside a
    /// Rendezvous home are refused.
    Prepare {
        path: PathBuf,
        /// Where to write the encrypted copy (default: ./<sha256>.rdvblob).
        #[arg(long, conflicts_with = "inline")]
        out: Option<PathBuf>,
        /// Send the file itself inside the envelope (at most 16 KiB).
        #[arg(long)]
        inline: bool,
        /// The name the peer is shown (default: the file's own name).
        #[arg(long)]
        name: Option<String>,
        /// Its type, a bare type/subtype such as application/pdf.
        #[arg(long = "type")]
        mime_type: Option<String>,
    },
    /// Files you prepared, files in tasks (with what was fetched), and
    /// direct transfers waiting for you.
    List,
    /// Fetch a task's files (all, or the one whose sha256 starts with
    /// SHA) into the quarantine under the home: https only, no private
    /// addresses, 25 MiB, hash and decryption checked. Only for a task you
    /// approved to start, or the results of a task you asked for.
    Fetch { task: String, sha: Option<String> },
    /// The direct-transfer setting (default off): on and off need you at
    /// an interactive terminal; status shows it and what waits; decline
    /// says no to a waiting transfer. No transfer protocol is implemented,
    /// so nothing ever connects.
    DirectTransfer {
        /// on, off, status or decline.
        action: String,
        /// The transfer to decline.
        transfer: Option<String>,
    },
}

/// A prepared file as kept (mode 600: it holds the key).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prepared {
    pub sha256: String,
    pub source: String,
    pub name: Option<String>,
    pub mime_type: Option<String>,
    /// The plaintext's size.
    pub plain_size: u64,
    /// Inline: the part as it will be sent.
    pub inline: Option<FilePart>,
    /// A reference: the metadata (with its key) and where the copy is.
    pub meta: Option<FileMeta>,
    pub copy: Option<String>,
}

fn home(g: &Global) -> Result<Home> {
    Home::resolve(g.home.clone(), g.profile.as_deref())
}

fn print(g: &Global, v: &Value) -> Result<()> {
    let mut so = std::io::stdout().lock();
    if g.json {
        return crate::terminal::write_line(&mut so, v);
    }
    if let Value::Object(m) = v {
        for (k, x) in m {
            let s = match x {
                Value::String(s) => terminal_safe(s),
                other => crate::terminal::printable(&other.to_string()),
            };
            writeln!(so, "{k}: {s}")?;
        }
    } else {
        writeln!(so, "{}", crate::terminal::printable(&v.to_string()))?;
    }
    so.flush()?;
    Ok(())
}

/// §7.7 (reference, NOTES 77): a path inside a Rendezvous home (this one,
/// or any under ~/.rendezvous) is refused, so the key file, the database
/// and the quarantine never leave as a file.
pub fn refuse_home_paths(path: &Path, home: &Path) -> Result<PathBuf> {
    let real = std::fs::canonicalize(path)
        .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    let mut homes = vec![home.to_path_buf()];
    if let Some(user) = std::env::var_os("HOME") {
        homes.push(PathBuf::from(user).join(".rendezvous"));
    }
    for h in homes {
        let h = std::fs::canonicalize(&h).unwrap_or(h);
        if real.starts_with(&h) {
            return Err(Error::Input(format!(
                "{} is inside a Rendezvous home: refused (its key, database and files never leave as a file)",
                path.display()
            )));
        }
    }
    Ok(real)
}

fn prepared_path(home: &Path, sha256: &str) -> PathBuf {
    home.join(PREPARED_DIR).join(format!("{sha256}.json"))
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

/// Prepares one file (§7.7): refused inside a home; inline up to 16 KiB,
/// otherwise encrypted under a fresh key with the copy written to `out`.
pub fn prepare(
    home: &Path,
    path: &Path,
    out: Option<&Path>,
    inline: bool,
    name: Option<&str>,
    mime_type: Option<&str>,
) -> Result<Prepared> {
    let real = refuse_home_paths(path, home)?;
    let len = std::fs::metadata(&real)?.len();
    if len > FILES_FETCH_MAX_BYTES {
        return Err(Error::Input(format!(
            "{} is over {FILES_FETCH_MAX_BYTES} bytes, the receiver's cap (SPEC §7.7)",
            path.display()
        )));
    }
    let bytes = std::fs::read(&real)?;
    let own_name = real
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string);
    let name = name.map(str::to_string).or(own_name);
    let source = real.display().to_string();
    let bad = |e: rdv_agent_core::file::FileError| Error::Input(e.to_string());
    let p = if inline {
        if bytes.len() > A2A_INLINE_FILE_MAX_BYTES {
            return Err(Error::Input(format!(
                "inline files are at most {A2A_INLINE_FILE_MAX_BYTES} bytes (SPEC §7.7): prepare it without --inline"
            )));
        }
        let part = inline_part(&bytes, name.as_deref(), mime_type).map_err(bad)?;
        Prepared {
            sha256: part.sha256(),
            source,
            name: part.name.clone(),
            mime_type: part.mime_type.clone(),
            plain_size: bytes.len() as u64,
            inline: Some(part),
            meta: None,
            copy: None,
        }
    } else {
        // Checked before encrypting: the name and type as they will go.
        let shown = inline_part(b"", name.as_deref(), mime_type).map_err(bad)?;
        let mut rng = rand_core::OsRng;
        let (cipher, meta) = rdv_agent_core::file::seal_blob(&bytes, &mut rng).map_err(bad)?;
        let copy = out
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(format!("{}.rdvblob", meta.sha256)));
        std::fs::write(&copy, &cipher)?;
        Prepared {
            sha256: meta.sha256.clone(),
            source,
            name: shown.name,
            mime_type: shown.mime_type,
            plain_size: bytes.len() as u64,
            inline: None,
            meta: Some(meta),
            copy: Some(copy.display().to_string()),
        }
    };
    keep_prepared(home, &p)?;
    Ok(p)
}

/// Keeps (or rewrites) a prepared file's record, mode 600.
pub fn keep_prepared(home: &Path, p: &Prepared) -> Result<()> {
    let body = serde_json::to_vec(p).map_err(|e| Error::Input(e.to_string()))?;
    write_private(&prepared_path(home, &p.sha256), &body)
}

fn prepared_all(home: &Path) -> Vec<Prepared> {
    let Ok(rd) = std::fs::read_dir(home.join(PREPARED_DIR)) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}

/// `--file SHA` (an inline prepared file) or `--file SHA=https://…` (a
/// prepared file whose encrypted copy you uploaded there), as a part of
/// yours to attach (§7.7). A sha256 prefix of 8 or more digits will do.
pub fn own_file(home: &Path, arg: &str) -> Result<OwnFile> {
    let (sha, url) = match arg.split_once('=') {
        Some((s, u)) => (s, Some(u)),
        None => (arg, None),
    };
    let hits: Vec<Prepared> = prepared_all(home)
        .into_iter()
        .filter(|p| sha.len() >= 8 && p.sha256.starts_with(&sha.to_ascii_lowercase()))
        .collect();
    let p = match hits.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(Error::Input(format!(
                "no prepared file {}: run rdv file prepare first",
                terminal_safe(sha)
            )));
        }
        _ => {
            return Err(Error::Input(
                "several prepared files match: give more of the sha256".into(),
            ));
        }
    };
    let part = match (&p.inline, &p.meta, url) {
        (Some(part), _, None) => part.clone(),
        (Some(_), _, Some(_)) => {
            return Err(Error::Input("an inline file takes no URL".into()));
        }
        (None, Some(meta), Some(u)) => {
            reference_part(meta.clone(), u, p.name.as_deref(), p.mime_type.as_deref())
                .map_err(|e| Error::Input(e.to_string()))?
        }
        _ => {
            return Err(Error::Input(format!(
                "give the https URL you uploaded {} to: --file {}=https://…",
                p.copy.as_deref().unwrap_or("the encrypted copy"),
                p.sha256
            )));
        }
    };
    Ok(OwnFile {
        part,
        source: p.source,
    })
}

/// Prepared files as `rdv file list` shows them (never their keys).
pub fn prepared_views(home: &Path) -> Vec<Value> {
    prepared_all(home)
        .iter()
        .map(|p| {
            json!({"sha256": p.sha256, "name": p.name, "size": p.plain_size,
                "source": p.source, "inline": p.inline.is_some(), "encrypted_copy": p.copy})
        })
        .collect()
}

/// Every file in the tasks as `rdv file list` shows it: as the gate shows
/// it (never a key), its task and role, and where it was saved if fetched.
/// The name is the peer's, unmarked: a front-end marks it.
pub fn task_file_views(home: &Path, rt: &Runtime) -> Vec<Value> {
    let mut in_tasks = Vec::new();
    for t in rt.agent().state.tasks.tasks.values() {
        for f in task_files(t) {
            let saved = saved_path(home, t, &f);
            let mut v = f.shown();
            v["task_id"] = json!(t.task_id);
            v["role"] = json!(match t.role {
                Role::Executor => "executor",
                Role::Requester => "requester",
            });
            v["fetched"] = json!(saved.exists().then(|| saved.display().to_string()));
            in_tasks.push(v);
        }
    }
    in_tasks
}

/// Fetches `files` of `t` (which passed `may_fetch`) into the quarantine
/// (§7.7): https only, public addresses only, 25 MiB, hash and decryption
/// checked. Each comes back as shown, with where it was saved and, when
/// short UTF-8, its text marked as peer text (§5.6).
pub async fn fetch_into_quarantine(
    home: &Path,
    t: &Task,
    files: Vec<FilePart>,
) -> Result<Vec<Value>> {
    if files.is_empty() {
        return Err(Error::Input("no such file in that task".into()));
    }
    let dns = Dns::from_env()?;
    let resolver: Arc<dyn crate::fetch::Resolve> = match DnsResolve::new(&dns)? {
        Some(r) => Arc::new(r),
        None => Arc::new(crate::fetch::DnsOff),
    };
    let fetcher = Fetcher::new(resolver, AddressPolicy::public_only());
    let mut out = Vec::new();
    for f in files {
        let plain = fetcher.fetch(&f).await?;
        let path = save_quarantined(home, &t.task_id, &f, &plain)?;
        let mut v = f.shown();
        v["saved"] = json!(path.display().to_string());
        // Short text only, marked as peer text (§7.7, §5.6).
        if plain.len() <= SHORT_TEXT_MAX_BYTES
            && let Ok(s) = std::str::from_utf8(&plain)
        {
            v["text"] = json!(UntrustedPeerText::new(s));
        }
        out.push(v);
    }
    Ok(out)
}

/// The files of a task: the request's and inputs' (executor), or those of
/// its results (requester).
pub fn task_files(t: &Task) -> Vec<FilePart> {
    match t.role {
        Role::Executor => t.files.clone(),
        Role::Requester => t
            .artifacts
            .iter()
            .flat_map(|a| a.parts.iter())
            .filter(|p| p["kind"] == "file")
            .filter_map(|p| rdv_agent_core::file::parse_part_value(p).ok())
            .collect(),
    }
}

pub fn find_task(rt: &Runtime, s: &str) -> Result<Task> {
    let hits: Vec<&Task> = rt
        .agent()
        .state
        .tasks
        .tasks
        .values()
        .filter(|t| t.task_id == s || (s.len() >= 8 && t.task_id.starts_with(s)))
        .collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Error::Input(format!("no task {}", terminal_safe(s)))),
        _ => Err(Error::Input(format!(
            "{} names several tasks: give more of the id",
            terminal_safe(s)
        ))),
    }
}

/// §7.7, §5.5: fetching follows the start gate. An executor fetches a
/// request's files only once its human approved the start; a requester
/// fetches its results' files when it chooses.
pub fn may_fetch(t: &Task) -> Result<()> {
    match t.role {
        Role::Requester => Ok(()),
        Role::Executor if t.started_by.is_some() => Ok(()),
        Role::Executor => Err(Error::Input(format!(
            "task {}: approve its start first (rdv task approve): files are fetched only after the start gate (SPEC §7.7)",
            t.task_id
        ))),
    }
}

fn saved_path(home: &Path, t: &Task, f: &FilePart) -> PathBuf {
    home.join(FILES_QUARANTINE_DIR)
        .join(&t.task_id)
        .join(quarantine_name(f))
}

/// A kept file part as the human (or a script) is shown it: its name
/// marked as peer-written, size, sha256, encryption and URLs; never the
/// key, never the bytes (§7.7, §5.6).
pub fn file_view(part: &Value) -> Value {
    match rdv_agent_core::file::parse_part_value(part) {
        Ok(f) => {
            let mut v = f.shown();
            v["name"] = json!(f.name.as_deref().map(UntrustedPeerText::new));
            v
        }
        Err(_) => Value::Null,
    }
}

/// The start gate's file lines (§7.7: each file's name, type, size,
/// sha256, encryption and URL), the name and type marked as peer-written.
pub fn start_gate_lines(t: &Task) -> Vec<String> {
    t.files
        .iter()
        .map(|f| {
            format!(
                "  file: «{}» (peer-written) type {} size {} sha256 {} {} {}",
                UntrustedPeerText::new(f.name.as_deref().unwrap_or("(no name)")),
                terminal_safe(f.mime_type.as_deref().unwrap_or("?")),
                f.size(),
                f.sha256(),
                if f.encrypted() { "encrypted" } else { "plain" },
                f.uri
                    .as_deref()
                    .map(|u| format!(
                        "at «{}» (peer-written, not fetched)",
                        UntrustedPeerText::new(u)
                    ))
                    .unwrap_or_else(|| "inline".into()),
            )
        })
        .collect()
}

/// A draft's content with each file part as the gate shows it: no key
/// ever leaves in what a human or a model is shown (§7.7).
pub fn draft_shown(draft: &rdv_agent_core::task::Draft) -> Value {
    let mut content = draft.content();
    let at = if content.get("request").is_some() {
        "/request/message/parts"
    } else {
        "/artifact/parts"
    };
    if let Some(parts) = content.pointer_mut(at).and_then(Value::as_array_mut) {
        for p in parts.iter_mut() {
            if p["kind"] == "file"
                && let Ok(f) = rdv_agent_core::file::parse_part_value(p)
            {
                *p = json!({"kind": "file", "file": f.shown()});
            }
        }
    }
    content
}

/// The release gate's lines: the draft with each file shown instead of its
/// wire form (no key on the screen), then each file of yours that would
/// leave: name, size, sha256, URL, the local file it was read from, and
/// the recipient (§5.5, §7.7).
pub fn release_gate_lines(t: &Task, draft: &rdv_agent_core::task::Draft) -> Vec<String> {
    use rdv_agent_core::task::Draft;
    let content = draft_shown(draft);
    let s = rdv_proto::canon::to_string(&content).unwrap_or_default();
    let mut out = vec![format!("  draft to release: {}", terminal_safe(&s))];
    let (parts, sources) = match draft {
        Draft::Artifact {
            artifact, sources, ..
        } => (artifact.get("parts"), Some(sources)),
        Draft::Request { message, sources } => (message.pointer("/message/parts"), Some(sources)),
        Draft::Status { .. } => (None, None),
    };
    if let Some(sources) = sources {
        let files = parts
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p["kind"] == "file")
            .filter_map(|p| rdv_agent_core::file::parse_part_value(p).ok());
        for f in files {
            let sha = f.sha256();
            let source = sources
                .iter()
                .find(|x| x.sha256 == sha)
                .map(|x| x.source.as_str())
                .unwrap_or("?");
            out.push(format!(
                "  your file leaves: {} size {} sha256 {} {} from {} to {} ({})",
                terminal_safe(f.name.as_deref().unwrap_or("(no name)")),
                f.size(),
                sha,
                f.uri
                    .as_deref()
                    .map(|u| format!("at {}", terminal_safe(u)))
                    .unwrap_or_else(|| "inline".into()),
                terminal_safe(source),
                t.peer,
                t.peer.fingerprint(),
            ));
        }
    }
    out
}

pub async fn run(cmd: FileCommandArgs, g: &Global) -> Result<()> {
    let home = home(g)?;
    match cmd {
        FileCommandArgs::Prepare {
            path,
            out,
            inline,
            name,
            mime_type,
        } => {
            let p = prepare(
                home.dir(),
                &path,
                out.as_deref(),
                inline,
                name.as_deref(),
                mime_type.as_deref(),
            )?;
            let next = if p.inline.is_some() {
                format!("rdv task submit <task> --file {}", p.sha256)
            } else {
                format!(
                    "upload {} anywhere over https, then: rdv task submit <task> --file {}=https://…",
                    p.copy.as_deref().unwrap_or_default(),
                    p.sha256
                )
            };
            print(
                g,
                &json!({
                    "sha256": p.sha256, "name": p.name, "mime_type": p.mime_type,
                    "size": p.plain_size, "source": p.source,
                    "inline": p.inline.is_some(), "encrypted_copy": p.copy, "next": next,
                }),
            )
        }
        FileCommandArgs::List => {
            let rt = Runtime::open(home.clone(), Options::default()).await?;
            let prepared = prepared_views(home.dir());
            let in_tasks = task_file_views(home.dir(), &rt);
            // The setting as checked (§7.7): one whose MAC does not verify
            // is off, and said so.
            let setting = rt.agent().direct_transfer_setting();
            let mut v = json!({"prepared": prepared, "in_tasks": in_tasks,
                "direct_transfer": setting == DirectTransferSetting::On});
            if setting == DirectTransferSetting::Tampered {
                v["notice"] = json!(rdv_agent_core::file::DIRECT_TRANSFER_TAMPERED);
            }
            print(g, &v)
        }
        FileCommandArgs::Fetch { task, sha } => {
            let rt = Runtime::open(home.clone(), Options::default()).await?;
            let t = find_task(&rt, &task)?;
            may_fetch(&t)?;
            let files: Vec<FilePart> = task_files(&t)
                .into_iter()
                .filter(|f| sha.as_deref().is_none_or(|s| f.sha256().starts_with(s)))
                .collect();
            drop(rt);
            let out = fetch_into_quarantine(home.dir(), &t, files).await?;
            print(g, &json!({"task_id": t.task_id, "fetched": out}))
        }
        FileCommandArgs::DirectTransfer { action, transfer } => {
            let c = match (action.as_str(), transfer) {
                ("on" | "off", _) if !std::io::stdin().is_terminal() => {
                    return Err(Error::Input(
                        "this needs you at an interactive terminal: stdin is not a terminal \
                         (SPEC §7.7: only the owner changes the direct-transfer setting, never a model or a peer)"
                            .into(),
                    ));
                }
                ("on", None) => FileCommand::DirectTransfer { on: true },
                ("off", None) => FileCommand::DirectTransfer { on: false },
                ("status", None) => FileCommand::DirectTransferStatus,
                ("decline", Some(t)) => FileCommand::DeclineTransfer { transfer: t },
                _ => {
                    return Err(Error::Input(
                        "rdv file direct-transfer on|off|status, or decline <transfer>".into(),
                    ));
                }
            };
            let mut rt = Runtime::open(home, Options::default()).await?;
            let v = rt.command(Command::File(c)).await?;
            print(g, &v)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rdv-file-cmd-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn paths_inside_the_home_are_refused() {
        let home = tmp("home");
        std::fs::write(home.join("key"), b"seed").unwrap();
        let e = prepare(&home, &home.join("key"), None, true, None, None).unwrap_err();
        assert!(e.to_string().contains("inside a Rendezvous home"), "{e}");
        // Also through a path that only leads there.
        let outside = tmp("outside");
        std::os::unix::fs::symlink(home.join("key"), outside.join("link")).unwrap();
        let e = prepare(&home, &outside.join("link"), None, true, None, None).unwrap_err();
        assert!(e.to_string().contains("inside a Rendezvous home"), "{e}");
        std::fs::remove_dir_all(&home).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn a_prepared_reference_is_encrypted_and_attached_by_its_url() {
        let home = tmp("home2");
        let work = tmp("work2");
        std::fs::write(work.join("plan.pdf"), b"the Q4 plan").unwrap();
        let copy = work.join("copy.bin");
        let p = prepare(
            &home,
            &work.join("plan.pdf"),
            Some(&copy),
            false,
            None,
            Some("application/pdf"),
        )
        .unwrap();
        let cipher = std::fs::read(&copy).unwrap();
        assert_ne!(cipher, b"the Q4 plan");
        assert_eq!(p.sha256, rdv_agent_core::file::sha256_hex(&cipher));
        // The kept record holds the key: mode 600.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(prepared_path(&home, &p.sha256))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Attached without a URL: refused; with an http URL: refused.
        assert!(own_file(&home, &p.sha256).is_err());
        assert!(own_file(&home, &format!("{}=http://files.example/x", p.sha256)).is_err());
        let f = own_file(
            &home,
            &format!("{}=https://files.example/x", &p.sha256[..12]),
        )
        .unwrap();
        assert_eq!(f.part.sha256(), p.sha256);
        assert!(f.part.encrypted());
        assert_eq!(f.part.open(&cipher).unwrap(), b"the Q4 plan");
        assert!(f.source.ends_with("plan.pdf"));
        // Inline: at most 16 KiB.
        std::fs::write(work.join("big"), vec![0u8; A2A_INLINE_FILE_MAX_BYTES + 1]).unwrap();
        assert!(prepare(&home, &work.join("big"), None, true, None, None).is_err());
        std::fs::remove_dir_all(&home).unwrap();
        std::fs::remove_dir_all(&work).unwrap();
    }

    fn task(role: Role, started: bool) -> Task {
        let now = time::OffsetDateTime::UNIX_EPOCH;
        Task {
            role,
            peer: rdv_proto::AgentKey::from_seed([1u8; 32]).id().clone(),
            task_id: "3f9a0000-0000-4000-8000-000000000001".into(),
            context_id: "3f9a0000-0000-4000-8000-000000000002".into(),
            capability: rdv_proto::consts::EXT_REQUEST.into(),
            class: rdv_agent_core::task::ApprovalClass::FreeForm,
            state: rdv_agent_core::task::TaskState::Submitted,
            reason: None,
            tombstone: false,
            tier: "friend".into(),
            created: now,
            expires: now,
            updated: now,
            input: None,
            texts: Vec::new(),
            seen: Vec::new(),
            inputs: 0,
            status_updates: 0,
            artifacts: Vec::new(),
            chunks: 0,
            unsupported_replies: 0,
            finished_replies: 0,
            gate: None,
            started_by: started.then(|| "code".to_string()),
            note: None,
            cancel_sent: false,
            files: Vec::new(),
        }
    }

    #[test]
    fn files_are_fetched_only_after_the_start_gate_or_for_our_own_results() {
        let e = may_fetch(&task(Role::Executor, false)).unwrap_err();
        assert!(e.to_string().contains("approve its start first"), "{e}");
        assert!(may_fetch(&task(Role::Executor, true)).is_ok());
        assert!(may_fetch(&task(Role::Requester, false)).is_ok());
    }

    #[test]
    fn a_file_view_shows_no_key_and_marks_the_name() {
        let mut rng = rand_core::OsRng;
        let (_, meta) = rdv_agent_core::file::seal_blob(b"x", &mut rng).unwrap();
        let part = reference_part(
            meta,
            "https://files.example/x",
            Some("a\u{202e}b.pdf"),
            None,
        )
        .unwrap();
        let wire = part.to_value();
        let key = wire["metadata"][rdv_proto::consts::EXT_FILES]["enc"]["key"]
            .as_str()
            .unwrap()
            .to_string();
        let v = file_view(&wire);
        assert!(!v.to_string().contains(&key));
        assert_eq!(v["encrypted"], true);
        assert_eq!(v["sha256"], part.sha256());
        assert!(
            v["name"]["untrusted_peer_text"]
                .as_str()
                .unwrap()
                .starts_with("a_b")
        );
    }
}
