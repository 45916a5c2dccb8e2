//! `rdv-directory`: serve, keygen, rotate, stats.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use rdv_directory::clock::{Clock, SystemClock};
use rdv_directory::config::Config;
use rdv_directory::{keys, server, store::Store};

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

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
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
    /// key). Restart the servers to load it.
    Rotate {
        /// How long the old key stays usable, e.g. 14d, 48h.
        #[arg(long, default_value = "14d")]
        grace: String,
    },
    /// Print listing counts per key, distinct agents and tombstones.
    Stats,
}

fn grace_secs(s: &str) -> anyhow::Result<i64> {
    let (n, unit) = s.split_at(s.len().saturating_sub(1));
    let n: i64 = n.parse().context("grace is <n><s|m|h|d>")?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => bail!("grace is <n><s|m|h|d>"),
    };
    Ok(n * mult)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let sub = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => sub.init(),
        LogFormat::Json => sub.json().init(),
    }
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
        Cmd::Rotate { grace } => {
            let path = cfg.key_path();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let mut file: keys::KeyFile = serde_json::from_str(&text)?;
            keys::rotate(
                &mut file,
                clock.now(),
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
            println!("restart the directory processes to load the new key");
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
    }
    Ok(())
}
