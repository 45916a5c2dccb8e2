//! The embedded broker's router (vendor/rumqttd, with the bridge's patch
//! "Memory the router gives back"): arbitrary sequences of subscribe,
//! unsubscribe, publish (retained or not), read and reconnect steps from a
//! few local links, persistent sessions included. Run with
//! `scripts/fuzz 120 mqtt_router`.
//!
//! Input: two bytes a step. The first picks the operation (low 3 bits) and
//! the link (next 2 bits); the second picks the filter or topic and, for a
//! publication, its size.
//!
//! Checked: the router thread never panics (libFuzzer's panic hook aborts
//! the process on a panic in any thread); and once every session has ended
//! (each link reconnected clean, then disconnected) the router holds no
//! filter, no log bytes, no subscription and no saved session: what the
//! patch promises, whatever came before.
#![no_main]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rumqttd::local::{LinkRx, LinkTx};
use rumqttd::protocol::{Disconnect, DisconnectReasonCode, Packet, Publish};
use rumqttd::{Broker, Config, Notification, RouterConfig, RouterGauges};

const LINKS: usize = 4;
const MAX_STEPS: usize = 256;
const FILTERS: [&str; 10] = [
    "a",
    "a/b",
    "a/+",
    "a/#",
    "#",
    "+/b",
    "+",
    "$share/g/a/b",
    "$share/h/a/#",
    "b",
];
const TOPICS: [&str; 6] = ["a", "a/b", "a/c", "b", "b/b", "a/b/c"];

struct Ctx {
    broker: Broker,
    gauges: std::sync::Arc<RouterGauges>,
    rt: tokio::runtime::Runtime,
}

fn ctx() -> &'static Ctx {
    static CTX: OnceLock<Ctx> = OnceLock::new();
    CTX.get_or_init(|| {
        let broker = Broker::new(Config {
            id: 0,
            router: RouterConfig {
                max_connections: 64,
                max_outgoing_packet_count: 16,
                // The smallest segments rumqttd allows, two of them, so
                // short inputs reach segment turnover and dropped segments.
                max_segment_size: 1024,
                max_segment_count: 2,
                custom_segment: None,
                initialized_filters: None,
                shared_subscriptions_strategy: Default::default(),
                max_retained_bytes: Some(4096),
            },
            ..Default::default()
        });
        let gauges = broker.gauges();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        Ctx { broker, gauges, rt }
    })
}

struct Link {
    id: String,
    tx: LinkTx,
    rx: LinkRx,
}

fn connect(c: &Ctx, id: &str, clean: bool) -> Link {
    let (tx, rx, _) = c
        .broker
        .link_builder(id)
        .clean_session(clean)
        .build()
        .expect("router accepts the link");
    Link {
        id: id.to_owned(),
        tx,
        rx,
    }
}

fn disconnect(c: &Ctx, l: &mut Link) {
    let d = Packet::Disconnect(
        Disconnect {
            reason_code: DisconnectReasonCode::NormalDisconnection,
        },
        None,
    );
    let _ = c.rt.block_on(l.tx.send(d));
}

/// Takes whatever the router has forwarded, without waiting.
fn drain(l: &mut Link) {
    for _ in 0..1024 {
        match l.rx.recv_deadline(Instant::now()) {
            Ok(Some(Notification::Unschedule)) => {
                let _ = l.rx.ready();
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let c = ctx();
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let mut links: Vec<Link> = (0..LINKS)
        .map(|i| connect(c, &format!("r{run}-{i}"), true))
        .collect();
    let mut persistent = [false; LINKS];
    for step in data.chunks_exact(2).take(MAX_STEPS) {
        let (op, arg) = (step[0], step[1]);
        let l = &mut links[usize::from(op >> 3) % LINKS];
        let filter = FILTERS[usize::from(arg) % FILTERS.len()];
        let topic = TOPICS[usize::from(arg) % TOPICS.len()];
        let size = usize::from(arg >> 3) * 40;
        match op & 7 {
            0 => {
                let _ = l.tx.subscribe(filter);
            }
            1 => {
                let _ = l.tx.unsubscribe(filter);
            }
            2 => {
                let _ = l.tx.publish(topic, vec![b'p'; size]);
            }
            3 | 4 => {
                // A retained publication; an empty one clears the topic's.
                let size = if op & 7 == 4 { 0 } else { size };
                let p = Publish::new(Bytes::from(topic), Bytes::from(vec![b'r'; size]), true);
                let _ = c.rt.block_on(l.tx.send(Packet::Publish(p, None)));
            }
            5 => drain(l),
            _ => {
                // The session ends and the same client comes back, with a
                // clean or a persistent session (a clean one after a
                // persistent one ends the saved session).
                disconnect(c, l);
                let clean = arg & 1 == 0;
                let i = usize::from(op >> 3) % LINKS;
                persistent[i] = !clean;
                let id = l.id.clone();
                *l = connect(c, &id, clean);
            }
        }
    }
    // Every session ends: persistent ones are taken over by a clean one
    // first, so nothing may stay behind.
    for (i, l) in links.iter_mut().enumerate() {
        disconnect(c, l);
        if persistent[i] {
            let id = l.id.clone();
            *l = connect(c, &id, true);
            disconnect(c, l);
        }
    }
    drop(links);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let g = c.gauges.read();
        if g.filters == 0 && g.log_bytes == 0 && g.subscriptions == 0 && g.saved_sessions == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the router kept state after every session ended: {g:?}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
});
