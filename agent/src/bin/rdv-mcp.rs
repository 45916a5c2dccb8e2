//! `rdv-mcp`: the Rendezvous MCP server on stdio (the same as `rdv mcp`).

use std::process::ExitCode;

use clap::Parser;

/// rdv-mcp: give an MCP client (Claude Desktop, Claude Code, Cursor, Codex)
/// a Rendezvous agent over stdio. stdout carries MCP only; notices for the
/// human (confirm phrases included) go to stderr.
#[derive(Debug, Parser)]
#[command(name = "rdv-mcp", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: rdv_agent::cli::Global,
    #[command(flatten)]
    mcp: rdv_agent::mcp::McpArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    rdv_agent::mcp::init_tracing();
    match rdv_agent::mcp::run_blocking(cli.mcp, &cli.global) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "rdv-mcp: {}",
                rdv_agent_core::peer_text::terminal_safe(&e.to_string())
            );
            ExitCode::FAILURE
        }
    }
}
