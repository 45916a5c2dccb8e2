//! `rdv-directory`: serve, keygen, rotate, stats; man, completions.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use rdv_directory::clock::{Clock, SystemClock};
use rdv_directory::config::Config;
use rdv_directory::{keys, server, store::Store};
use rdv_service_kit::cli_docs::{self, DocsCommand};
use rdv_service_kit::telemetry::LogFormat;

/// The Rendezvous discovery directory (SPEC §4.5): RFC 9497 VOPRF blinded
/// lookups of sealed, signed listings. See docs/directory.md.
#[derive(Parser)]
#[command(name = "rdv-directory", version)]
struct Cli {
    /// TOML configuration file; `RDV_DIRECTORY_*` variables override it.
    #[arg(long, global = true, env = "RDV_DIRECTORY_CONFIG")]
    config: Option<PathBuf>,
    /// Holds the SQLite database and the key file by default.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// `sqlite://PATH?mode=rwc` or `postgres://…`.
    #[arg(long, global = true)]
    database: Option<String>,
    /// The OPRF key file (default `<data-dir>/oprf-keys.json`).
    #[arg(long, global = true)]
    key_file: Option<PathBuf>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the API; prints the bound address ("listening on http://…").
    Serve {
        /// Address to bind, e.g. 0.0.0.0:8480 (port 0 picks one).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Create the key file with one fresh OPRF key (refuses to overwrite).
    Keygen,
    /// Add a new key; current keys stay listed for the grace period, after
    /// which their listings stop resolving (agents re-publish under the new
    /// key). Running servers reload the key file every `key_reload_secs`
    /// (and on SIGHUP): no restart.
    Rotate {
        /// How long the old key stays usable, e.g. 14d, 48h.
        #[arg(long, default_value = "14d")]
        grace: String,
        /// When the new key takes effect, e.g. 2m: with several servers
        /// sharing the key file, at least `key_reload_secs`, so every one
        /// holds the new key before any lists it.
        #[arg(long, default_value = "0s")]
        activate_in: String,
    },
    /// Print listing counts per key, distinct agents and tombstones.
    Stats,
    #[command(flatten)]
    Docs(DocsCommand),
}

fn grace_secs(s: &str) -> anyhow::Result<i64> {
    rdv_proto::time::parse_duration(s).context("durations are <n><s|m|h|d>, e.g. 14d")
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    rdv_service_kit::telemetry::init(cli.log_format, "info");
    let mut cfg = Config::load(cli.config.as_deref())?;
    if let Some(d) = cli.data_dir {
        cfg.data_dir = d;
    }
    if let Some(d) = cli.database {
        cfg.database = Some(d);
    }
    if let Some(k) = cli.key_file {
        cfg.key_file = Some(k);
    }
    let clock = SystemClock;
    let rt = tokio::runtime::Runtime::new()?;
    match cli.cmd {
        Cmd::Serve { listen } => {
            if let Some(l) = listen {
                cfg.listen = l;
            }
            rt.block_on(server::serve(cfg, Arc::new(clock)))?;
        }
        Cmd::Keygen => {
            let path = cfg.key_path();
            if path.exists() {
                bail!("{} exists; use `rotate` to add a key", path.display());
            }
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = keys::keygen(clock.now(), &mut rand_core::OsRng);
            keys::write(&path, &file)?;
            let ring = keys::KeyRing::from_file(&file, &path.display().to_string())?;
            for k in ring.all() {
                println!("created key {} in {}", k.id, path.display());
            }
        }
        Cmd::Rotate { grace, activate_in } => {
            let path = cfg.key_path();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let mut file: keys::KeyFile = serde_json::from_str(&text)?;
            let now = clock.now();
            keys::rotate_at(
                &mut file,
                now,
                now + time::Duration::seconds(grace_secs(&activate_in)?),
                time::Duration::seconds(grace_secs(&grace)?),
                &mut rand_core::OsRng,
            )?;
            keys::write(&path, &file)?;
            let ring = keys::KeyRing::from_file(&file, &path.display().to_string())?;
            for k in ring.all() {
                println!(
                    "key {} not_before {} not_after {}",
                    k.id,
                    rdv_proto::time::format_time(k.not_before),
                    k.not_after.map_or("-".into(), rdv_proto::time::format_time)
                );
            }
            println!(
                "running directory processes load the new key within key_reload_secs ({}s), or at once on SIGHUP",
                cfg.key_reload_secs
            );
        }
        Cmd::Stats => {
            let st = rt.block_on(async {
                let s = Store::connect(&cfg.database_url(), 2).await?;
                let st = s.stats().await;
                s.close().await;
                st
            })?;
            println!("listings {}", st.listings);
            println!("agents {}", st.agents);
            println!("tombstones {}", st.tombstones);
            for (k, n) in st.per_key {
                println!("key {k} listings {n}");
            }
        }
        Cmd::Docs(docs) => cli_docs::run::<Cli>(&docs)?,
    }
    Ok(())
}
