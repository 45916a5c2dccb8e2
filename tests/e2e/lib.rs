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

/// A directory of its own under the temp directory, removed when dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A new, empty directory named after `stem`, this process and a counter.
    pub fn new(stem: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("rdv-e2e-{stem}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temp directory");
        TempDir { path }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for TempDir {
    /// Removed, unless `RDV_E2E_KEEP` is set (to read the logs of a failure).
    fn drop(&mut self) {
        if std::env::var_os("RDV_E2E_KEEP").is_some() {
            eprintln!("kept {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A loopback port that was free a moment ago: bound to 127.0.0.1:0 and
/// released, for a server that cannot report the port it chose. Never the
/// same port twice in one test process.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let given = given.get_or_insert_with(HashSet::new);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        if given.insert(port) {
            return port;
        }
    }
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)).is_ok()
}

/// The `nostr-rs-relay` binary named by `RDV_NOSTR_RS_RELAY` (an
/// independent Nostr relay, version 0.8.12; `scripts/nostr-rs-relay install`
/// builds it). Unset: under CI (`CI` set) the test fails, since a journey
/// must not pass without running; elsewhere it prints a skip line and
/// returns `None`.
pub fn nostr_rs_relay_bin(test: &str) -> Option<PathBuf> {
    let set = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    match set("RDV_NOSTR_RS_RELAY") {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "RDV_NOSTR_RS_RELAY={} is not a file (scripts/nostr-rs-relay install builds it)",
                p.display()
            );
            Some(p)
        }
        None if set("CI").is_some() => panic!(
            "{test} needs nostr-rs-relay: RDV_NOSTR_RS_RELAY is not set under CI \
             (.ci/run builds it with scripts/nostr-rs-relay install; scripts/test exports it)"
        ),
        None => {
            // Straight to the process's stderr, past the test harness's
            // capture, so the skip shows in a passing run too.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP {test}: RDV_NOSTR_RS_RELAY is not set; `scripts/nostr-rs-relay install` \
                 builds nostr-rs-relay 0.8.12 and prints its path"
            );
            None
        }
    }
}
