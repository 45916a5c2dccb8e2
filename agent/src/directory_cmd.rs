//! `rdv directory` (SPEC §4.5). `add`, `remove URL` and `list` change and
//! show the directories this home's agent uses (for discovery, suggestions
//! and listing), through the core. `list-me` and `unlist` list this agent
//! (its key and current card) in those directories under each public
//! address, or withdraw it. `publish|remove --url|lookup` try a directory
//! with a key read from `--seed-file` (64 hex digits) and a card from
//! `--card`, without a home.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;
use rdv_agent_core::Command;
use rdv_directory_client::DirectoryClient;
use rdv_proto::doc::card::Card;
use rdv_proto::{Address, AgentKey};

use serde_json::{Value, json};

use crate::cli::Global;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::runtime::{Options, Runtime};
use crate::terminal::{ascii_json, printable, write_line};

#[derive(Debug, Subcommand)]
pub enum DirectoryCommand {
    /// Use one more directory (https://…): discovery, suggestions and
    /// list-me ask every directory this agent uses. Nothing is sent to it now.
    Add {
        /// The directory's base URL, e.g. https://dir.example
        url: String,
    },
    /// Stop using a directory: `rdv directory remove URL` (its listings of
    /// this agent stay until they expire: `rdv directory unlist --directory
    /// URL` first withdraws them). With --url, --address and --seed-file
    /// instead, and no home: withdraw a listing made with `publish`.
    Remove {
        /// The directory to stop using (as `rdv directory list` shows it).
        #[arg(
            value_name = "URL",
            required_unless_present = "url",
            conflicts_with_all = ["url", "address", "seed_file"]
        )]
        directory: Option<String>,
        /// Without a home: the directory to withdraw a listing from.
        #[arg(long, value_name = "URL", requires_all = ["address", "seed_file"])]
        url: Option<String>,
        /// Without a home: the listed address.
        #[arg(long, requires = "url")]
        address: Option<String>,
        /// Without a home: file holding the agent's Ed25519 seed (64 hex digits).
        #[arg(long, requires = "url")]
        seed_file: Option<PathBuf>,
    },
    /// The directories this agent uses, and whether suggestions are on.
    List,
    /// List this agent in its directories under each public address on its
    /// card (opt-in: a publishing act, §4.5). Run again after the card
    /// changes, and before the listing expires.
    ListMe {
        /// This directory instead of every configured one. Repeatable.
        #[arg(long = "directory", value_name = "URL")]
        directories: Vec<String>,
        /// Days until the listings expire unless listed again (1-30).
        #[arg(long, default_value_t = 30)]
        days: i64,
    },
    /// Withdraw this agent's listings from its directories: each public
    /// address, and each address removed from the card since its last
    /// publication, under every key the directory lists.
    Unlist {
        /// This directory instead of every configured one. Repeatable.
        #[arg(long = "directory", value_name = "URL")]
        directories: Vec<String>,
    },
    /// Without a home: list an agent's card (--card) in a directory under one
    /// of its addresses (the card must claim it), signed with the key in
    /// --seed-file. Opt-in: nothing is listed unless you run this. `remove
    /// --url --address --seed-file` withdraws it.
    Publish {
        /// The directory's base URL, e.g. https://dir.example
        #[arg(long)]
        url: String,
        /// The address (email or +phone) to be findable by.
        #[arg(long)]
        address: String,
        /// File holding the agent's Ed25519 seed as 64 hex digits.
        #[arg(long)]
        seed_file: PathBuf,
        /// The agent's signed card (JSON).
        #[arg(long)]
        card: PathBuf,
        /// Days until the listing expires unless re-published (1-30).
        #[arg(long, default_value_t = 30)]
        days: i64,
    },
    /// Without a home: look addresses up in a directory; prints each
    /// verified card that claims one. The directory sees only a bucket,
    /// never the address.
    Lookup {
        #[arg(long)]
        url: String,
        /// Emails or +phone numbers.
        #[arg(required = true)]
        addresses: Vec<String>,
    },
}

fn input(e: impl std::fmt::Display) -> Error {
    Error::Input(e.to_string())
}

impl DirectoryCommand {
    /// `add`, `remove URL`, `list`, `list-me` and `unlist` work from the
    /// agent's home (main.rs runs them on the agent's runtime, through
    /// `agent_cmd::run`).
    pub fn uses_home(&self) -> bool {
        matches!(
            self,
            DirectoryCommand::Add { .. }
                | DirectoryCommand::Remove {
                    directory: Some(_),
                    ..
                }
                | DirectoryCommand::List
                | DirectoryCommand::ListMe { .. }
                | DirectoryCommand::Unlist { .. }
        )
    }
}

/// No directory to ask: how to name one.
pub fn no_directory() -> Error {
    Error::Input(
        "no directory is configured (rdv directory add URL); or name one with --directory URL"
            .into(),
    )
}

/// One result: a JSON line, or `key: value` lines.
pub(crate) fn print_value(v: &Value, json_out: bool) -> Result<()> {
    let mut so = std::io::stdout().lock();
    if json_out {
        return write_line(&mut so, v);
    }
    if let Some(m) = v.as_object() {
        for (k, x) in m {
            let text = match x {
                Value::String(s) => s.clone(),
                Value::Array(a) => a
                    .iter()
                    .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => other.to_string(),
            };
            writeln!(so, "{k}: {}", printable(&text))?;
        }
    }
    so.flush()?;
    Ok(())
}

/// `add`, `remove URL` and `list`: the directories the home's agent uses.
async fn configured(cmd: DirectoryCommand, g: &Global) -> Result<()> {
    let home = Home::resolve(g.home.clone(), g.profile.as_deref())?;
    let mut rt = Runtime::open(home, Options::default()).await?;
    let v = match cmd {
        DirectoryCommand::Add { url } => rt.command(Command::AddDirectory { url }).await?,
        DirectoryCommand::Remove {
            directory: Some(url),
            ..
        } => rt.command(Command::RemoveDirectory { url }).await?,
        _ => {
            let p = rt.agent().state.profile()?;
            json!({ "directories": p.directories, "suggest": p.suggest })
        }
    };
    print_value(&v, g.json)
}

/// Runs `list-me` or `unlist` for the home's agent: one line per directory
/// and address (`--json`: one object per line). Fails if any of them failed.
pub async fn run_home(cmd: DirectoryCommand, g: &Global) -> Result<()> {
    let (dirs, days, listing) = match cmd {
        DirectoryCommand::ListMe { directories, days } => (directories, days, true),
        DirectoryCommand::Unlist { directories } => (directories, 0, false),
        c if c.uses_home() => return configured(c, g).await,
        _ => return Err(Error::Input("not a home directory command".into())),
    };
    if listing && !(1..=30).contains(&days) {
        return Err(Error::Input("--days must be 1 to 30".into()));
    }
    let home = Home::resolve(g.home.clone(), g.profile.as_deref())?;
    let rt = Runtime::open(home, Options::default()).await?;
    let p = rt.agent().state.profile()?.clone();
    let dirs = if dirs.is_empty() {
        p.directories.clone()
    } else {
        dirs
    };
    if dirs.is_empty() {
        return Err(no_directory());
    }
    let now = time::OffsetDateTime::now_utc();
    let card = Card::verify(&p.card, now, p.allow_ws)?;
    let mut addrs: Vec<Address> = Vec::new();
    let public = p.addresses.iter().filter(|a| a.public).map(|a| &a.address);
    let removed = p.removed_addresses.iter().filter(|_| !listing);
    for raw in public.chain(removed) {
        let a = Address::parse(raw)?;
        // Listed only under an address the card claims (§4.5 lookups check it).
        if (!listing || card.claims(&a)) && !addrs.contains(&a) {
            addrs.push(a);
        }
    }
    if addrs.is_empty() {
        return Err(Error::Input(
            "this agent's card lists no public address (rdv address add ADDRESS)".into(),
        ));
    }
    let key = AgentKey::from_seed(*rt.home().read_seed()?);
    let key = std::sync::Arc::new(key);
    let doc = std::sync::Arc::new(p.card.clone());
    let mut failed = 0usize;
    let mut so = std::io::stdout();
    for dir in &dirs {
        for a in &addrs {
            let (d, a2, key, doc) = (dir.clone(), a.clone(), key.clone(), doc.clone());
            let r = tokio::task::spawn_blocking(move || {
                let c = DirectoryClient::new(&d);
                let mut rng = rand_core::OsRng;
                let now = time::OffsetDateTime::now_utc();
                if listing {
                    c.publish(&key, &doc, &a2, now, time::Duration::days(days), &mut rng)
                        .map(|r| (r.status, r.claims))
                } else {
                    c.remove(&key, &a2, now, &mut rng).map(|rs| {
                        let removed = rs.iter().any(|r| r.status == "removed");
                        let claims = rs.iter().map(|r| r.claims).max().unwrap_or(0);
                        let status = if removed { "removed" } else { "absent" };
                        (status.to_string(), claims)
                    })
                }
            })
            .await
            .map_err(|e| Error::Carrier(e.to_string()))?;
            let v = match r {
                Ok((status, claims)) => {
                    json!({"directory": dir, "address": a.canon(), "status": status, "claims": claims})
                }
                Err(e) => {
                    failed += 1;
                    json!({"directory": dir, "address": a.canon(), "error": e.to_string()})
                }
            };
            if g.json {
                write_line(&mut so, &v)?;
            } else {
                let what = match (v.get("status"), v.get("error")) {
                    (Some(s), _) => format!(
                        "{} (claims on this address: {})",
                        s.as_str().unwrap_or_default(),
                        v["claims"]
                    ),
                    (_, Some(e)) => format!("error: {}", e.as_str().unwrap_or_default()),
                    _ => String::new(),
                };
                writeln!(
                    so,
                    "{} {}: {}",
                    printable(dir),
                    printable(a.canon()),
                    printable(&what)
                )?;
            }
        }
    }
    if failed > 0 {
        return Err(Error::Carrier(format!(
            "{failed} of {} directory requests failed",
            dirs.len() * addrs.len()
        )));
    }
    Ok(())
}

/// Runs one command, writing what it found to `out`.
pub fn run(cmd: &DirectoryCommand, out: &mut impl Write) -> Result<()> {
    let now = time::OffsetDateTime::now_utc();
    let mut rng = rand_core::OsRng;
    match cmd {
        DirectoryCommand::Add { .. }
        | DirectoryCommand::List
        | DirectoryCommand::ListMe { .. }
        | DirectoryCommand::Unlist { .. } => {
            return Err(Error::Input(
                "add, remove URL, list, list-me and unlist run on the agent's home \
                 (agent_cmd::run)"
                    .into(),
            ));
        }
        DirectoryCommand::Publish {
            url,
            address,
            seed_file,
            card,
            days,
        } => {
            if !(1..=30).contains(days) {
                return Err(Error::Input("--days must be 1 to 30".into()));
            }
            let key = crate::home::read_seed_file(seed_file)?;
            let doc =
                rdv_proto::canon::parse(&std::fs::read(card)?, rdv_proto::consts::CARD_MAX_BYTES)?;
            let c = Card::verify(&doc, now, false)?;
            let addr = Address::parse(address)?;
            if &c.id != key.id() {
                return Err(Error::Input("the card is not this agent's".into()));
            }
            if !c.claims(&addr) {
                return Err(Error::Input("the card does not list this address".into()));
            }
            let r = DirectoryClient::new(url)
                .publish(
                    &key,
                    &doc,
                    &addr,
                    now,
                    time::Duration::days(*days),
                    &mut rng,
                )
                .map_err(input)?;
            writeln!(out, "{} (claims on this address: {})", r.status, r.claims)?;
        }
        DirectoryCommand::Remove {
            url: Some(url),
            address: Some(address),
            seed_file: Some(seed_file),
            ..
        } => {
            let key = crate::home::read_seed_file(seed_file)?;
            let addr = Address::parse(address)?;
            for r in DirectoryClient::new(url)
                .remove(&key, &addr, now, &mut rng)
                .map_err(input)?
            {
                writeln!(out, "{}", r.status)?;
            }
        }
        DirectoryCommand::Remove { .. } => {
            return Err(Error::Input(
                "rdv directory remove takes a URL, or --url, --address and --seed-file".into(),
            ));
        }
        DirectoryCommand::Lookup { url, addresses } => {
            let addrs = addresses
                .iter()
                .map(|a| Address::parse(a))
                .collect::<rdv_proto::Result<Vec<_>>>()?;
            let found = DirectoryClient::new(url)
                .lookup(&addrs, now, false, &mut rng)
                .map_err(input)?;
            for f in found {
                let n = f.cards.len();
                if n == 0 {
                    writeln!(out, "{}: not found", f.address.canon())?;
                }
                if n > 1 {
                    writeln!(
                        out,
                        "{}: {n} agents claim this address (claims are self-asserted)",
                        f.address.canon()
                    )?;
                }
                for c in f.cards {
                    let doc = ascii_json(&c.card.doc).map_err(|e| Error::Input(e.to_string()))?;
                    writeln!(out, "{}: {} {doc}", f.address.canon(), c.card.id)?;
                }
                for e in f.refused {
                    writeln!(out, "{}: refused a listing: {e}", f.address.canon())?;
                }
            }
        }
    }
    Ok(())
}
