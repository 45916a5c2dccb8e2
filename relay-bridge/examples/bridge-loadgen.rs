//! Load generator for the relay bridge (issue #5 benchmarks), beside
//! Debian's `mosquitto` in the same run. Loopback only; every loop is bounded
//! in count and time. Figures and how to read them:
//! docs/benchmarks/relay-bridge.md.
//!
//! ```sh
//! cargo build --release -p rdv-relay-bridge --bin rdv-relay-bridge --example bridge-loadgen
//! target/release/examples/bridge-loadgen --bridge target/release/rdv-relay-bridge
//! ```
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as smpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

/// Hard cap on any one scenario.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(120);
/// A receiver stops after this long without a message once sending is done.
const IDLE: Duration = Duration::from_secs(5);
const MAX_PACKET: usize = rdv_bridge_client::DEFAULT_MAX_BODY + rdv_bridge_client::PACKET_OVERHEAD;

static T0: OnceLock<Instant> = OnceLock::new();

fn now_us() -> u64 {
    T0.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// A UTF-8 payload of `size` bytes carrying its sequence number and the
/// time it was due to be sent.
fn payload(seq: u64, due_us: u64, size: usize) -> Vec<u8> {
    let mut p = format!("{seq:010} {due_us:020} ").into_bytes();
    p.resize(size.max(p.len()), b'x');
    p
}

fn parse(p: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(p.get(..31)?).ok()?;
    Some((s[..10].parse().ok()?, s[11..31].parse().ok()?))
}

/// What a receiver saw.
#[derive(Default)]
struct Seen {
    seen: Vec<bool>,
    received: u64,
    dups: u64,
    lat_us: Vec<u64>,
    first_us: Option<u64>,
    last_us: u64,
    bytes: u64,
}

impl Seen {
    fn new(n: u64) -> Seen {
        Seen {
            seen: vec![false; n as usize],
            ..Default::default()
        }
    }
    fn record(&mut self, p: &[u8]) {
        let Some((seq, due)) = parse(p) else { return };
        let t = now_us();
        match self.seen.get_mut(seq as usize) {
            Some(s) if *s => self.dups += 1,
            Some(s) => {
                *s = true;
                self.received += 1;
                self.bytes += p.len() as u64;
                self.lat_us.push(t.saturating_sub(due));
                self.first_us.get_or_insert(t);
                self.last_us = t;
            }
            None => {}
        }
    }
    fn done(&self) -> bool {
        self.received as usize == self.seen.len()
    }
    /// What several receivers saw together (deliveries, not messages).
    fn merge(mut self, other: Seen) -> Seen {
        self.received += other.received;
        self.dups += other.dups;
        self.bytes += other.bytes;
        self.lat_us.extend(other.lat_us);
        self.first_us = match (self.first_us, other.first_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_us = self.last_us.max(other.last_us);
        self
    }
}

struct Row {
    scenario: String,
    target: String,
    sent: u64,
    seen: Seen,
    start_us: u64,
    /// CPU seconds the server process(es) used during the scenario.
    cpu_s: f64,
}

/// CPU seconds (user + system, all threads) a process has used so far,
/// from `/proc/<pid>/stat` (clock ticks of 1/100 s on Linux).
fn cpu_secs(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the `(comm)`, which may itself hold spaces.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after `)`.
    (tick(11) + tick(12)) / 100.0
}

fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_secs(*p)).sum()
}

/// Waits (at most 30 s) until the servers are idle: under 2% of a core for
/// 250 ms. Every row then starts from a quiet server, not one still writing
/// the previous row's burst to its cache.
async fn settle(pids: &[u32]) {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let a = cpu_of(pids);
        tokio::time::sleep(Duration::from_millis(250)).await;
        if cpu_of(pids) - a < 0.005 {
            return;
        }
    }
}

/// Runs one scenario and records the CPU the server processes used in it,
/// background work included: the count ends once the servers are idle
/// again, so a cache writer still catching up after the last arrival is
/// counted (a fixed 300 ms used to cut it short at 32 KB). The idle test
/// itself may add up to 5 ms of CPU.
async fn measured(pids: &[u32], scenario: impl std::future::Future<Output = Row>) -> Row {
    settle(pids).await;
    let before = cpu_of(pids);
    let mut row = scenario.await;
    settle(pids).await;
    row.cpu_s = cpu_of(pids) - before;
    row
}

impl Row {
    fn pct(&self, q: f64) -> f64 {
        let mut v = self.seen.lat_us.clone();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v[i] as f64 / 1000.0
    }
    fn print(&self) {
        let secs = (self.seen.last_us.saturating_sub(self.start_us)) as f64 / 1e6;
        let rate = if secs > 0.0 {
            self.seen.received as f64 / secs
        } else {
            0.0
        };
        let cpu_us = self.cpu_s * 1e6 / (self.seen.received.max(1) as f64);
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.2} | {:.2} | {:.2} | {:.0} |",
            self.scenario,
            self.target,
            self.sent,
            self.seen.received,
            self.seen.dups,
            rate,
            self.seen.bytes as f64 / secs.max(1e-9) / 1e6,
            self.pct(0.5),
            self.pct(0.99),
            self.pct(1.0),
            cpu_us,
        );
    }
}

fn mqtt_opts(id: &str, port: u16) -> MqttOptions {
    let mut o = MqttOptions::new(id, "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(30));
    o.set_max_packet_size(MAX_PACKET, MAX_PACKET);
    o.set_clean_session(true);
    o.set_inflight(200);
    o
}

/// An MQTT subscriber, subscribed when this returns; it records until it
/// has `n` messages, or `IDLE` after `stop` is set, or the scenario timeout.
async fn mqtt_subscriber(
    port: u16,
    topic: &str,
    qos: QoS,
    n: u64,
    stop: Arc<Mutex<Option<Instant>>>,
) -> tokio::task::JoinHandle<Seen> {
    let id = format!("bench-sub-{}", now_us());
    let (c, mut ev) = AsyncClient::new(mqtt_opts(&id, port), 1000);
    ev.network_options.set_tcp_nodelay(true);
    c.subscribe(topic, qos).await.unwrap();
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ev.poll()).await {
            Ok(Ok(Event::Incoming(Packet::SubAck(_)))) => break,
            Ok(Ok(_)) => {}
            other => panic!("subscribe on port {port}: {other:?}"),
        }
    }
    tokio::spawn(async move {
        let _c = c;
        let mut s = Seen::new(n);
        while !s.done() && Instant::now() < deadline {
            if stop.lock().unwrap().is_some_and(|t| t.elapsed() > IDLE) {
                break;
            }
            match tokio::time::timeout(Duration::from_millis(200), ev.poll()).await {
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) => s.record(&p.payload),
                Ok(Ok(_)) | Err(_) => {}
                Ok(Err(e)) => {
                    eprintln!("subscriber: {e}");
                    break;
                }
            }
        }
        s
    })
}

/// Publishes `n` messages on MQTT, as fast as the client goes (`rate`
/// None) or paced at `rate` per second; returns when all are handed over
/// (QoS 1: acknowledged). Returns when it started sending.
async fn mqtt_publisher(
    port: u16,
    topic: &str,
    qos: QoS,
    size: usize,
    n: u64,
    rate: Option<u64>,
) -> u64 {
    let id = format!("bench-pub-{}", now_us());
    let (c, mut ev) = AsyncClient::new(mqtt_opts(&id, port), 1000);
    ev.network_options.set_tcp_nodelay(true);
    let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let a2 = acked.clone();
    let (up_tx, up_rx) = tokio::sync::oneshot::channel();
    let driver = tokio::spawn(async move {
        let deadline = Instant::now() + SCENARIO_TIMEOUT;
        let mut up = Some(up_tx);
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_millis(500), ev.poll()).await {
                Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => {
                    if let Some(u) = up.take() {
                        let _ = u.send(());
                    }
                }
                Ok(Ok(Event::Incoming(Packet::PubAck(_))))
                | Ok(Ok(Event::Outgoing(rumqttc::Outgoing::Publish(0)))) => {
                    a2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect))) => return,
                Ok(Ok(_)) | Err(_) => {}
                Ok(Err(e)) => {
                    eprintln!("publisher: {e}");
                    return;
                }
            }
        }
    });
    // The clock starts once connected: connection setup is not latency.
    tokio::time::timeout(Duration::from_secs(10), up_rx)
        .await
        .expect("no CONNACK within 10 s")
        .expect("publisher connection failed");
    let start = now_us();
    for seq in 0..n {
        let due = match rate {
            Some(r) => {
                let due = start + seq * 1_000_000 / r;
                let wait = due.saturating_sub(now_us());
                if wait > 0 {
                    tokio::time::sleep(Duration::from_micros(wait)).await;
                }
                due
            }
            None => now_us(),
        };
        c.publish(topic, qos, false, payload(seq, due, size))
            .await
            .unwrap();
    }
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    while acked.load(std::sync::atomic::Ordering::Relaxed) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = c.disconnect().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), driver).await;
    start
}

#[allow(clippy::too_many_arguments)]
async fn mqtt_to_mqtt(
    scenario: &str,
    target: &str,
    port: u16,
    qos: QoS,
    size: usize,
    n: u64,
    rate: Option<u64>,
    subscribers: usize,
) -> Row {
    let topic = format!("bench{}", now_us());
    let stop = Arc::new(Mutex::new(None));
    let mut subs = Vec::new();
    for _ in 0..subscribers.max(1) {
        subs.push(mqtt_subscriber(port, &topic, qos, n, stop.clone()).await);
    }
    let start_us = mqtt_publisher(port, &topic, qos, size, n, rate).await;
    *stop.lock().unwrap() = Some(Instant::now());
    let mut seen = Seen::default();
    for sub in subs {
        seen = seen.merge(sub.await.unwrap());
    }
    Row {
        scenario: scenario.into(),
        target: target.into(),
        sent: n,
        seen,
        start_us,
        cpu_s: 0.0,
    }
}

/// ntfy `PUT /<topic>` at `rate` per second from 4 threads (keep-alive),
/// into an MQTT subscriber.
async fn ntfy_to_mqtt(target: &str, http: &str, port: u16, qos: QoS, n: u64, rate: u64) -> Row {
    let topic = format!("bench{}", now_us());
    let stop = Arc::new(Mutex::new(None));
    let sub = mqtt_subscriber(port, &topic, qos, n, stop.clone()).await;
    let start_us = now_us();
    let url = format!("{http}/{topic}");
    tokio::task::spawn_blocking(move || {
        let threads = 4;
        let hs: Vec<_> = (0..threads)
            .map(|k| {
                let url = url.clone();
                std::thread::spawn(move || {
                    let agent = ureq::AgentBuilder::new()
                        .timeout(Duration::from_secs(10))
                        .build();
                    let mut seq = k;
                    while seq < n {
                        let due = start_us + seq * 1_000_000 / rate;
                        let wait = due.saturating_sub(now_us());
                        if wait > 0 {
                            std::thread::sleep(Duration::from_micros(wait));
                        }
                        if let Err(e) = agent.put(&url).send_bytes(&payload(seq, due, 256)) {
                            eprintln!("publish: {e}");
                        }
                        seq += threads;
                    }
                })
            })
            .collect();
        for h in hs {
            let _ = h.join();
        }
    })
    .await
    .unwrap();
    *stop.lock().unwrap() = Some(Instant::now());
    Row {
        scenario: format!(
            "ntfy PUT → MQTT sub (QoS {}), 256 B, {rate}/s",
            if qos == QoS::AtMostOnce { 0 } else { 1 }
        ),
        target: target.into(),
        sent: n,
        seen: sub.await.unwrap(),
        start_us,
        cpu_s: 0.0,
    }
}

/// MQTT publish at `rate` per second into an ntfy SSE subscriber.
async fn mqtt_to_sse(target: &str, http: &str, port: u16, n: u64, rate: u64) -> Row {
    let topic = format!("bench{}", now_us());
    let url = format!("{http}/{topic}/sse");
    let (open_tx, open_rx) = smpsc::channel();
    let stop = Arc::new(Mutex::new(None::<Instant>));
    let stop2 = stop.clone();
    let reader = std::thread::spawn(move || {
        let agent = ureq::AgentBuilder::new()
            .timeout_read(Duration::from_millis(500))
            .build();
        let r = agent.get(&url).call().unwrap();
        let mut lines = BufReader::new(r.into_reader());
        let mut s = Seen::new(n);
        let deadline = Instant::now() + SCENARIO_TIMEOUT;
        let mut line = String::new();
        while !s.done() && Instant::now() < deadline {
            if stop2.lock().unwrap().is_some_and(|t| t.elapsed() > IDLE) {
                break;
            }
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => continue, // read timeout: check the bounds
            }
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
                continue;
            };
            match v["event"].as_str() {
                Some("open") => {
                    let _ = open_tx.send(());
                }
                Some("message") => {
                    if let Some(m) = v["message"].as_str() {
                        s.record(m.as_bytes());
                    }
                }
                _ => {}
            }
        }
        s
    });
    open_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let start_us = mqtt_publisher(port, &topic, QoS::AtMostOnce, 256, n, Some(rate)).await;
    *stop.lock().unwrap() = Some(Instant::now());
    let seen = tokio::task::spawn_blocking(move || reader.join().unwrap())
        .await
        .unwrap();
    Row {
        scenario: format!("MQTT pub → ntfy SSE sub, 256 B, {rate}/s"),
        target: target.into(),
        sent: n,
        seen,
        start_us,
        cpu_s: 0.0,
    }
}

/// Resident memory of a process, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// One MQTT client driven a packet at a time (`--memory`).
struct Stepper {
    c: AsyncClient,
    ev: rumqttc::EventLoop,
}

impl Stepper {
    async fn connect(id: &str, port: u16) -> Stepper {
        let (c, ev) = AsyncClient::new(mqtt_opts(id, port), 1000);
        let mut s = Stepper { c, ev };
        s.until(|e| matches!(e, Event::Incoming(Packet::ConnAck(_))))
            .await;
        s
    }

    /// Polls until `done` has seen `n` matching events.
    async fn until_n(&mut self, n: usize, done: impl Fn(&Event) -> bool) {
        let mut seen = 0;
        while seen < n {
            match tokio::time::timeout(Duration::from_secs(10), self.ev.poll()).await {
                Ok(Ok(e)) if done(&e) => seen += 1,
                Ok(Ok(_)) => {}
                other => panic!("memory churn: {other:?}"),
            }
        }
    }

    async fn until(&mut self, done: impl Fn(&Event) -> bool) {
        self.until_n(1, done).await
    }
}

/// `--memory`: what a server keeps after traffic it no longer needs. Each
/// round subscribes to a topic no one used before, publishes `per_round`
/// messages of `size` bytes to it (received back), and unsubscribes; then
/// `retained` topics each get a retained message of `size` bytes.
/// Prints resident memory before and after each phase.
async fn memory(name: &str, port: u16, pid: u32, rounds: u64, retained: u64) {
    const SIZE: usize = 16 * 1024;
    const PER_ROUND: usize = 8;
    let mut c = Stepper::connect(&format!("churn-{}", now_us()), port).await;
    let body = vec![b'm'; SIZE];
    let rss0 = rss_mib(pid);
    for r in 0..rounds {
        let t = format!("churn/{r}");
        c.c.subscribe(&t, QoS::AtLeastOnce).await.unwrap();
        c.until(|e| matches!(e, Event::Incoming(Packet::SubAck(_))))
            .await;
        for _ in 0..PER_ROUND {
            c.c.publish(&t, QoS::AtLeastOnce, false, body.clone())
                .await
                .unwrap();
        }
        c.until_n(PER_ROUND, |e| {
            matches!(e, Event::Incoming(Packet::Publish(_)))
        })
        .await;
        c.c.unsubscribe(&t).await.unwrap();
        c.until(|e| matches!(e, Event::Incoming(Packet::UnsubAck(_))))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = rss_mib(pid);
    for r in 0..retained {
        c.c.publish(format!("kept/{r}"), QoS::AtLeastOnce, true, body.clone())
            .await
            .unwrap();
        c.until(|e| matches!(e, Event::Incoming(Packet::PubAck(_))))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss2 = rss_mib(pid);
    let churned = rounds as f64 * (PER_ROUND * SIZE) as f64 / 1048576.0;
    let kept = retained as f64 * SIZE as f64 / 1048576.0;
    println!(
        "| {name} | {rss0:.1} | {churned:.0} MiB in {rounds} rounds | {rss1:.1} | {kept:.0} MiB on {retained} topics | {rss2:.1} |"
    );
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_port(port: u16) {
    for _ in 0..400 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("nothing listens on {port}");
}

fn start_mosquitto(bin: &str, dir: &std::path::Path) -> (Proc, u16) {
    let port = free_port();
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
             max_queued_messages 100000\nmax_inflight_messages 200\nset_tcp_nodelay true\nlog_dest none\n"
        ),
    )
    .unwrap();
    let c = Command::new(bin).arg("-c").arg(&conf).spawn().unwrap();
    wait_port(port);
    (Proc(c), port)
}

/// The floor relay (examples/mqtt-floor.rs), appending to `append` if
/// given, with O_DIRECT if `direct`.
fn start_floor(bin: &PathBuf, append: Option<PathBuf>, direct: bool) -> (Proc, u16) {
    let mut cmd = Command::new(bin);
    if let Some(a) = append {
        cmd.arg("--append").arg(a);
    }
    if direct {
        cmd.arg("--direct");
    }
    let mut c = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    (Proc(c), first.trim().parse().unwrap())
}

/// The bridge binary with limits opened up for one loopback visitor;
/// `external` points it at an external broker instead of the embedded one.
fn start_bridge(
    bin: &PathBuf,
    dir: &std::path::Path,
    external: Option<u16>,
    filter_log_bytes: u64,
) -> (Proc, String, u16) {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--http-listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .env("RDV_BRIDGE_LIMITS__REQUEST_BURST", "1000000")
        .env("RDV_BRIDGE_LIMITS__REQUEST_REPLENISH_MS", "1")
        .env("RDV_BRIDGE_LIMITS__GLOBAL_BURST", "1000000")
        .env("RDV_BRIDGE_LIMITS__GLOBAL_REQUESTS_PER_SEC", "1000000")
        .env("RDV_BRIDGE_LIMITS__BYTES_PER_DAY", "1000000000000")
        .env("RDV_BRIDGE_LIMITS__MQTT_PUBLISH_BURST", "1000000")
        .env("RDV_BRIDGE_LIMITS__MQTT_PUBLISH_PER_SEC", "1000000")
        .env("RDV_BRIDGE_LIMITS__MQTT_GLOBAL_PUBLISH_BURST", "1000000")
        .env("RDV_BRIDGE_LIMITS__MQTT_GLOBAL_PUBLISH_PER_SEC", "1000000")
        .env(
            "RDV_BRIDGE_MQTT__FILTER_LOG_BYTES",
            filter_log_bytes.to_string(),
        )
        .env("RUST_LOG", "warn,rumqttd=off")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match external {
        Some(p) => {
            cmd.env("RDV_BRIDGE_MQTT__MODE", "external")
                .env(
                    "RDV_BRIDGE_MQTT__EXTERNAL_URL",
                    format!("mqtt://127.0.0.1:{p}"),
                )
                .env(
                    "RDV_BRIDGE_MQTT__CLIENT_ID",
                    format!("bench-bridge-{}", now_us()),
                );
        }
        None => {
            cmd.args(["--mqtt-listen", "127.0.0.1:0"]);
        }
    }
    let mut c = cmd.spawn().unwrap();
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    std::thread::spawn(move || for _ in lines {});
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    let http = format!("http://{}", v["http"].as_str().unwrap());
    let port = match external {
        Some(p) => p,
        None => v["mqtt"]
            .as_str()
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, p)| p.parse().ok())
            .unwrap(),
    };
    (Proc(c), http, port)
}

fn main() {
    let mut bridge = PathBuf::from("target/release/rdv-relay-bridge");
    let mut mosquitto = String::from("/usr/sbin/mosquitto");
    let mut quick = false;
    let mut only: Option<String> = None;
    let mut big: Option<u64> = None;
    let mut memory_mode = false;
    let mut floor: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bridge" => bridge = args.next().unwrap().into(),
            "--mosquitto" => mosquitto = args.next().unwrap(),
            "--quick" => quick = true,
            "--only" => only = args.next(),
            "--big" => big = args.next().and_then(|n| n.parse().ok()),
            "--memory" => memory_mode = true,
            "--floor" => floor = args.next().map(PathBuf::from),
            _ => panic!(
                "usage: loadgen [--bridge PATH] [--mosquitto PATH] [--floor PATH] [--quick] [--only SUBSTRING] [--big N] [--memory]"
            ),
        }
    }
    let wanted = |label: &str| only.as_deref().is_none_or(|o| label.contains(o));
    T0.get_or_init(Instant::now);
    let dir = tempfile::tempdir().unwrap();
    let (m, mport) = start_mosquitto(&mosquitto, dir.path());
    let bdir = dir.path().join("bridge");
    // Throughput rows: a queue as deep as mosquitto's here (100,000
    // messages), 128 MiB per filter, so a subscriber behind a 32 KB burst
    // loses nothing. Memory rows: the default, 32 MiB.
    let log = if memory_mode { 32 << 20 } else { 128 << 20 };
    let (b, http, bport) = start_bridge(&bridge, &bdir, None, log);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scale = if quick { 10 } else { 1 };
    if memory_mode {
        println!(
            "| server | RSS MiB at start | churn: subscribe, publish, unsubscribe | RSS MiB after | retained | RSS MiB after |"
        );
        println!("| --- | --- | --- | --- | --- | --- |");
        let (rounds, retained) = (2000 / scale, 8000 / scale);
        rt.block_on(async {
            memory("rdv-relay-bridge", bport, b.0.id(), rounds, retained).await;
            memory("mosquitto", mport, m.0.id(), rounds, retained).await;
            let (_, body) = ureq::get(&format!("{http}/metrics"))
                .call()
                .map(|r| ((), r.into_string().unwrap_or_default()))
                .unwrap();
            for l in body.lines().filter(|l| l.starts_with("rdv_bridge_mqtt_")) {
                println!("    {l}");
            }
        });
        return;
    }
    let (n_small, n_rate) = (20_000 / scale, 5_000 / scale);
    let n_big = big.unwrap_or(2_000 / scale);
    println!(
        "| scenario | target | sent | received | dups | msg/s | MB/s | p50 ms | p99 ms | max ms | server CPU µs/msg |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let (bpid, mpid) = (b.0.id(), m.0.id());
    // The floor (examples/mqtt-floor.rs): a one-thread relay, then the same
    // appending every frame to a file (through the page cache, and with
    // O_DIRECT), on the MQTT→MQTT max-rate rows.
    let floors: Vec<(Proc, u16)> = floor
        .iter()
        .flat_map(|bin| {
            [
                (None, false),
                (Some(dir.path().join("floor.bin")), false),
                (Some(dir.path().join("floor-direct.bin")), true),
            ]
            .map(|(a, direct)| start_floor(bin, a, direct))
        })
        .collect();
    rt.block_on(async {
        let mut to_bridge = 0u64;
        let mut targets = vec![
            ("rdv-relay-bridge", bport, bpid),
            ("mosquitto", mport, mpid),
        ];
        for ((p, port), name) in floors.iter().zip([
            "floor: relay",
            "floor: relay + append",
            "floor: relay + O_DIRECT append",
        ]) {
            targets.push((name, *port, p.0.id()));
        }
        let targets = &targets;
        for (qos, qn) in [(QoS::AtMostOnce, 0), (QoS::AtLeastOnce, 1)] {
            for (size, n) in [(256usize, n_small), (32 * 1024, n_big)] {
                for &(name, port, pid) in targets {
                    let label = format!(
                        "MQTT→MQTT max rate, QoS {qn}, {}",
                        if size < 1024 {
                            "256 B".into()
                        } else {
                            format!("{} KB", size / 1024)
                        }
                    );
                    if wanted(&label) {
                        // One unmeasured burst first: the first tens of MB
                        // into a fresh process and a fresh cache file pay
                        // for growing them (page faults, file extension),
                        // which a long-running server has long paid.
                        mqtt_to_mqtt(&label, name, port, qos, size, n, None, 1).await;
                        let run = mqtt_to_mqtt(&label, name, port, qos, size, n, None, 1);
                        measured(&[pid], run).await.print();
                        if pid == bpid {
                            to_bridge += 2 * n;
                        }
                    }
                }
            }
            for &(name, port, pid) in &targets[..2] {
                let label = format!("MQTT→MQTT 1000/s, QoS {qn}, 256 B");
                if wanted(&label) {
                    let run = mqtt_to_mqtt(&label, name, port, qos, 256, n_rate, Some(1000), 1);
                    measured(&[pid], run).await.print();
                    if pid == bpid {
                        to_bridge += n_rate;
                    }
                }
            }
        }
        // Fan-out: one publisher, four subscribers. The cache is paid per
        // publication, delivery per subscriber (msg/s counts deliveries).
        for &(name, port, pid) in targets {
            let label = "MQTT→MQTT max rate, QoS 0, 32 KB, 4 subscribers (deliveries)";
            if wanted(label) {
                mqtt_to_mqtt(label, name, port, QoS::AtMostOnce, 32 * 1024, n_big, None, 4).await;
                let run = mqtt_to_mqtt(label, name, port, QoS::AtMostOnce, 32 * 1024, n_big, None, 4);
                measured(&[pid], run).await.print();
                if pid == bpid {
                    to_bridge += 2 * n_big;
                }
            }
        }
        // The bridge also carries every MQTT publication to the ntfy side
        // and its cache; a lagging carrier would lose the oldest past
        // `filter_log_bytes` without the MQTT rows showing it.
        settle(&[bpid]).await;
        let carried = ureq::get(&format!("{http}/metrics"))
            .call()
            .ok()
            .and_then(|r| r.into_string().ok())
            .and_then(|body| {
                body.lines()
                    .find_map(|l| l.strip_prefix("rdv_bridge_messages_in_total{protocol=\"mqtt\"} "))
                    .and_then(|n| n.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        println!();
        println!("bridge: {carried} of {to_bridge} MQTT publications carried to the ntfy side and its cache");
        println!();
        if !wanted("ntfy PUT → MQTT sub, MQTT pub → ntfy SSE sub") {
            return;
        }
        // The external-mode bridge subscribes to everything on mosquitto:
        // started only now, so the MQTT→MQTT rows above measure mosquitto
        // alone, as a user would run it.
        let edir = dir.path().join("bridge-ext");
        let (e, ext_http, _) = start_bridge(&bridge, &edir, Some(mport), 128 << 20);
        let ext = [e.0.id(), mpid];
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce] {
            let run = ntfy_to_mqtt(
                "rdv-relay-bridge (embedded)",
                &http,
                bport,
                qos,
                n_rate,
                1000,
            );
            measured(&[bpid], run).await.print();
            let run = ntfy_to_mqtt(
                "rdv-relay-bridge → mosquitto (external)",
                &ext_http,
                mport,
                qos,
                n_rate,
                1000,
            );
            measured(&ext, run).await.print();
        }
        let run = mqtt_to_sse("rdv-relay-bridge (embedded)", &http, bport, n_rate, 1000);
        measured(&[bpid], run).await.print();
        let run = mqtt_to_sse(
            "mosquitto → rdv-relay-bridge (external)",
            &ext_http,
            mport,
            n_rate,
            1000,
        );
        measured(&ext, run).await.print();
    });
}
