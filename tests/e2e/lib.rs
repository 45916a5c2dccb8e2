//! Helpers for the end-to-end tests: find the workspace's binaries and run
//! them as a person would.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// A binary of this workspace, next to the test executable's `deps/`
/// directory. `cargo test --workspace` builds them all before any test runs.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile directory");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the workspace binaries first (`cargo test --workspace` does)",
        path.display()
    );
    path
}

/// Runs a command to completion with the given stdin.
pub fn run(cmd: &mut Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    child.wait_with_output().expect("wait")
}

/// A fresh path in the temp directory for this process.
fn tempfile_path(stem: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("rdv-e2e-{stem}-{}-{n}.log", std::process::id()))
}

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` and waits for the line it prints with its bound address
/// (`listening on http://…`), reading its stdout.
pub fn start_server(mut cmd: Command) -> Server {
    use std::io::BufRead;
    let log = tempfile_path("server-stderr");
    let err = std::fs::File::create(&log).expect("stderr log");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .expect("spawn server");
    let stdout = child.stdout.take().expect("server stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let url = loop {
        let Some(line) = lines.next() else {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("server exited before printing its address; its stderr:\n{text}");
        };
        let line = line.expect("read line");
        if let Some(i) = line.find("http://") {
            break line[i..]
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        }
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, url }
}
