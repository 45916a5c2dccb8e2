//! `rdv`: a thin shell over `rdv_agent`.

use std::io::{Read, Write};
use std::process::ExitCode;

use clap::Parser;
use rdv_agent::cli::{Cli, Command, ProtoCommand};
use rdv_agent::conformance::{self, Ctx, STDIN_MAX_BYTES};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match cli.command {
        Command::Proto(cmd) => proto(&cmd),
        // list-me and unlist work from the agent's home, on its runtime.
        Command::Directory(cmd) if cmd.uses_home() => {
            report(run_agent(Command::Directory(cmd), &cli.global))
        }
        Command::Directory(cmd) => report(rdv_agent::directory_cmd::run(
            &cmd,
            &mut std::io::stdout().lock(),
        )),
        Command::Bridge(cmd) => report(rdv_agent::bridge_cmd::run(
            &cmd,
            &mut std::io::stdout().lock(),
        )),
        Command::Gateway(args) => report(rdv_agent::gateway_cmd::run(
            &args,
            &mut std::io::stdout().lock(),
        )),
        Command::Mcp(args) => {
            init_tracing();
            report(rdv_agent::mcp::run_blocking(args, &cli.global))
        }
        Command::Man { out } => report(write_man_pages(&out)),
        Command::Demo(args) => report(rdv_agent::demo::run(&args).map(|_| ())),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "rdv", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        agent => report(run_agent(agent, &cli.global)),
    }
}

/// `rdv man`: one roff page per command, generated from the same clap
/// definitions as `--help`, so the two never disagree.
fn write_man_pages(out: &std::path::Path) -> rdv_agent::Result<()> {
    std::fs::create_dir_all(out)?;
    let cmd = <Cli as clap::CommandFactory>::command();
    fn walk(
        cmd: &clap::Command,
        name: String,
        out: &std::path::Path,
        n: &mut usize,
    ) -> rdv_agent::Result<()> {
        let mut buf = Vec::new();
        let page = cmd
            .clone()
            .display_name(name.clone())
            .bin_name(name.replace('-', " "));
        clap_mangen::Man::new(page)
            .title(name.clone())
            .render(&mut buf)?;
        std::fs::write(out.join(format!("{name}.1")), buf)?;
        *n += 1;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, format!("{name}-{}", sub.get_name()), out, n)?;
        }
        Ok(())
    }
    let mut n = 0;
    walk(&cmd, "rdv".into(), out, &mut n)?;
    println!("wrote {n} man pages to {}", out.display());
    Ok(())
}

/// The agent's commands run on a tokio runtime (the relays, the store).
fn run_agent(cmd: Command, g: &rdv_agent::cli::Global) -> rdv_agent::Result<()> {
    init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(rdv_agent::agent_cmd::run(cmd, g))
}

/// Logs go to stderr, as JSON lines when RDV_LOG_JSON is set; RDV_LOG
/// sets the filter (default: warnings). Never a secret or peer content.
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    // The Nostr SDK logs relay messages with their content: never shown.
    let directives = format!(
        "{},{}",
        std::env::var("RDV_LOG").unwrap_or_else(|_| "warn".into()),
        rdv_agent::transport::nostr::SDK_LOG_DIRECTIVE
    );
    let filter = EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("warn"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var_os("RDV_LOG_JSON").is_some() {
        b.json().init();
    } else {
        b.init();
    }
}

/// Exit status and a one-line message for the person at the terminal.
fn report(result: rdv_agent::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdv: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--help` and `--version` print as usual. Under `rdv proto`, a bad
/// argument is invalid input like any other: exit 1 with one JSON line
/// (docs/conformance.md); elsewhere clap's usual message and exit code.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let display_only = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand;
    let conformance = std::env::args().nth(1).as_deref() == Some("proto");
    if display_only || !conformance {
        e.exit();
    }
    let first = e.to_string();
    let reason = first
        .lines()
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ");
    eprintln!("{}", serde_json::json!({ "error": reason }));
    ExitCode::FAILURE
}

fn proto(cmd: &ProtoCommand) -> ExitCode {
    let result = match cmd {
        ProtoCommand::Vectors(a) => write_vectors(&a.out).map(|()| Vec::new()),
        _ => read_stdin(cmd).and_then(|stdin| {
            let mut rng = rand_core::OsRng;
            let mut ctx = Ctx {
                now: time::OffsetDateTime::now_utc(),
                rng: &mut rng,
            };
            conformance::run(cmd, &stdin, &mut ctx).map_err(|e| e.to_string())
        }),
    };
    match result {
        Ok(out) => {
            let mut so = std::io::stdout().lock();
            if so.write_all(&out).and_then(|()| so.flush()).is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(reason) => {
            let line = serde_json::json!({ "error": reason });
            eprintln!("{line}");
            ExitCode::FAILURE
        }
    }
}

/// Commands that take no document do not wait for stdin.
fn read_stdin(cmd: &ProtoCommand) -> Result<Vec<u8>, String> {
    if matches!(cmd, ProtoCommand::Keygen(_) | ProtoCommand::Topic(_)) {
        return Ok(Vec::new());
    }
    let mut buf = Vec::new();
    std::io::stdin()
        .take(STDIN_MAX_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("reading stdin: {e}"))?;
    if buf.len() > STDIN_MAX_BYTES {
        return Err(format!("stdin over {STDIN_MAX_BYTES} bytes"));
    }
    Ok(buf)
}

fn write_vectors(dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    for (name, v) in rdv_proto::vectors::generate().map_err(|e| e.to_string())? {
        let mut text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        text.push('\n');
        std::fs::write(dir.join(format!("{name}.json")), text).map_err(|e| e.to_string())?;
    }
    Ok(())
}
