//! `man` and `completions` for every service binary (issue #17, packaging):
//! roff pages and shell completion scripts generated from the same clap
//! definitions as `--help`, so the three never disagree. Written once here;
//! each `main.rs` flattens [`DocsCommand`] into its subcommands and hands it
//! to [`run`].

use std::io::Write;
use std::path::{Path, PathBuf};

/// The two subcommands each service binary carries, as `rdv` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DocsCommand {
    /// Write man pages, one for the command (NAME.1) and one per
    /// subcommand (NAME-SUBCOMMAND.1), into a folder
    /// (e.g. /usr/local/share/man/man1).
    Man {
        /// The folder to write into (created if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Print a shell completion script for bash, zsh, fish, elvish or
    /// powershell on stdout.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Runs `man` or `completions` for the binary whose CLI is `C`, reporting
/// on stdout (the pages written, or the script itself).
pub fn run<C: clap::CommandFactory>(docs: &DocsCommand) -> std::io::Result<()> {
    let cmd = C::command();
    let mut stdout = std::io::stdout().lock();
    match docs {
        DocsCommand::Man { out } => {
            let pages = write_man_pages(&cmd, out)?;
            writeln!(
                stdout,
                "wrote {} man pages to {}",
                pages.len(),
                out.display()
            )
        }
        DocsCommand::Completions { shell } => write_completions(cmd, *shell, &mut stdout),
    }
}

/// Writes `NAME.1` for `cmd` and `NAME-SUB.1` (recursively `NAME-SUB-SUB.1`)
/// for every visible subcommand into `out`; returns the files written.
pub fn write_man_pages(cmd: &clap::Command, out: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)?;
    let name = cmd.get_name().to_owned();
    // Every page's footer names the program and its version, as the top one.
    let source = match cmd.get_version() {
        Some(v) => format!("{name} {v}"),
        None => name.clone(),
    };
    let mut written = Vec::new();
    let page = Page {
        file: name.clone(),
        usage: name,
    };
    walk(cmd, &page, &source, out, &mut written)?;
    Ok(written)
}

/// One page's names: its file stem (`rdv-directory-rotate`) and how its
/// synopsis calls it (`rdv-directory rotate`).
struct Page {
    file: String,
    usage: String,
}

fn walk(
    cmd: &clap::Command,
    page: &Page,
    source: &str,
    out: &Path,
    written: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let shown = cmd
        .clone()
        .display_name(page.file.clone())
        .bin_name(page.usage.clone());
    let mut buf = Vec::new();
    clap_mangen::Man::new(shown)
        .title(page.file.clone())
        .source(source.to_owned())
        .render(&mut buf)?;
    let path = out.join(format!("{}.1", page.file));
    std::fs::write(&path, buf)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let child = Page {
            file: format!("{}-{}", page.file, sub.get_name()),
            usage: format!("{} {}", page.usage, sub.get_name()),
        };
        walk(sub, &child, source, out, written)?;
    }
    Ok(())
}

/// The completion script for `cmd` under its own name.
pub fn write_completions(
    mut cmd: clap::Command,
    shell: clap_complete::Shell,
    w: &mut dyn Write,
) -> std::io::Result<()> {
    let name = cmd.get_name().to_owned();
    clap_complete::generate(shell, &mut cmd, name, w);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    /// A service-shaped CLI: its own subcommands plus the shared two.
    #[derive(Parser)]
    #[command(name = "rdv-example", version = "1.2.3")]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[derive(Subcommand)]
    enum Cmd {
        /// Serve the example API.
        Serve {
            /// Address to bind.
            #[arg(long)]
            listen: Option<String>,
        },
        #[command(flatten)]
        Docs(DocsCommand),
    }

    #[test]
    fn a_page_per_subcommand_from_the_help_text() {
        let dir = tempfile::tempdir().unwrap();
        let pages = write_man_pages(&Cli::command(), dir.path()).unwrap();
        let names: Vec<_> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "rdv-example.1",
                "rdv-example-serve.1",
                "rdv-example-man.1",
                "rdv-example-completions.1"
            ]
        );
        let top = std::fs::read_to_string(dir.path().join("rdv-example.1")).unwrap();
        for sub in ["serve", "man", "completions"] {
            assert!(top.contains(sub), "{sub} missing from {top}");
        }
        let serve = std::fs::read_to_string(dir.path().join("rdv-example-serve.1")).unwrap();
        assert!(serve.contains(".TH"), "{serve}");
        assert!(serve.contains("Address to bind"), "{serve}");
        assert!(serve.contains("listen"), "{serve}");
        // The synopsis calls it as typed, the footer names the program.
        assert!(serve.contains("rdv\\-example serve"), "{serve}");
        assert!(
            serve.contains(".TH rdv-example-serve 1  \"rdv-example 1.2.3\""),
            "{serve}"
        );
    }

    #[test]
    fn completions_name_the_binary_and_its_subcommands() {
        let mut out = Vec::new();
        write_completions(Cli::command(), clap_complete::Shell::Bash, &mut out).unwrap();
        let script = String::from_utf8(out).unwrap();
        // bash: `complete -F _rdv__example … rdv-example`.
        assert!(
            script
                .lines()
                .any(|l| l.trim_start().starts_with("complete ") && l.ends_with(" rdv-example")),
            "{script}"
        );
        assert!(script.contains("serve"), "{script}");
        assert!(script.contains("--listen"), "{script}");
    }

    #[test]
    fn the_shared_subcommands_parse_inside_a_service_cli() {
        let cli = Cli::try_parse_from(["rdv-example", "man", "--out", "/tmp/x"]).unwrap();
        assert!(matches!(
            cli.cmd,
            Cmd::Docs(DocsCommand::Man { ref out }) if out == Path::new("/tmp/x")
        ));
        let cli = Cli::try_parse_from(["rdv-example", "completions", "zsh"]).unwrap();
        assert!(matches!(
            cli.cmd,
            Cmd::Docs(DocsCommand::Completions {
                shell: clap_complete::Shell::Zsh
            })
        ));
        let err = Cli::try_parse_from(["rdv-example", "completions", "tcsh"])
            .err()
            .unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
    }
}
