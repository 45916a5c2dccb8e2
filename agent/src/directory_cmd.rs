//! `rdv directory publish|remove|lookup` (SPEC §4.5): try a discovery
//! directory from a terminal. Until the agent has a key store, the agent's
//! key is read from `--seed-file` (64 hex digits) and its card from `--card`.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;
use rdv_directory_client::DirectoryClient;
use rdv_proto::doc::card::Card;
use rdv_proto::{Address, AgentKey};

use crate::error::{Error, Result};
use crate::terminal::ascii_json;

#[derive(Debug, Subcommand)]
pub enum DirectoryCommand {
    /// List this agent's card in a directory under one of its addresses
    /// (the card must claim it). Opt-in: nothing is listed unless you run this.
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
    /// Withdraw this agent's listing of an address (under every listed key).
    Remove {
        #[arg(long)]
        url: String,
        #[arg(long)]
        address: String,
        #[arg(long)]
        seed_file: PathBuf,
    },
    /// Look addresses up; prints each verified card that claims one.
    /// The directory sees only a bucket, never the address.
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

fn read_seed(path: &PathBuf) -> Result<AgentKey> {
    let text = std::fs::read_to_string(path)?;
    let seed = rdv_proto::encoding::hex_array::<32>("seed", text.trim())?;
    Ok(AgentKey::from_seed(seed))
}

/// Runs one command, writing what it found to `out`.
pub fn run(cmd: &DirectoryCommand, out: &mut impl Write) -> Result<()> {
    let now = time::OffsetDateTime::now_utc();
    let mut rng = rand_core::OsRng;
    match cmd {
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
            let key = read_seed(seed_file)?;
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
            url,
            address,
            seed_file,
        } => {
            let key = read_seed(seed_file)?;
            let addr = Address::parse(address)?;
            for r in DirectoryClient::new(url)
                .remove(&key, &addr, now, &mut rng)
                .map_err(input)?
            {
                writeln!(out, "{}", r.status)?;
            }
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
