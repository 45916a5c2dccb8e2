//! The floor under the MQTT→MQTT rows of the load generator: the least an
//! MQTT relay must do, in one thread, for the load generator's clients and
//! nothing else. It reads each frame, answers CONNECT, SUBSCRIBE, PINGREQ
//! and QoS 1 PUBLISH, and writes each PUBLISH frame as received to the
//! topic's subscribers. With `--append FILE` it also appends each frame to
//! that file, as a cache must: the one copy caching adds (`--direct`: with
//! O_DIRECT, to see whether skipping the page cache makes it cheaper).
//!
//! It is a measuring stick, not a broker: no sessions, no retries, no
//! limits, no wildcards, MQTT 3.1.1 only. `bridge-loadgen --floor PATH`
//! runs it beside the bridge and mosquitto (docs/benchmarks/relay-bridge.md,
//! "The floor").
//!
//! ```sh
//! mqtt-floor [--append FILE [--direct]]   # prints the port it listens on
//! ```
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::rc::Rc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};

type Writer = Rc<tokio::sync::Mutex<OwnedWriteHalf>>;

#[derive(Default)]
struct State {
    subscribers: HashMap<Vec<u8>, Vec<Writer>>,
    append: Option<Append>,
}

/// Where frames are appended: through the page cache, or (`--direct`) with
/// O_DIRECT from a staging buffer aligned to 4 KiB, written in whole
/// 256 KiB blocks, so the kernel does not copy them (a tail under one
/// block is not written).
enum Append {
    Buffered(std::fs::File),
    Direct {
        file: std::fs::File,
        stage: Vec<u8>,
        start: usize,
        len: usize,
    },
}

const DIRECT_BLOCK: usize = 256 * 1024;

impl Append {
    fn open(path: &str, direct: bool) -> Append {
        let mut o = std::fs::OpenOptions::new();
        o.create(true).write(true).truncate(true);
        if !direct {
            return Append::Buffered(o.open(path).unwrap());
        }
        // O_DIRECT on Linux x86_64 and aarch64.
        std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, 0o40000);
        let stage = vec![0u8; 2 * DIRECT_BLOCK + 4096];
        let start = (4096 - stage.as_ptr() as usize % 4096) % 4096;
        Append::Direct {
            file: o.open(path).unwrap(),
            stage,
            start,
            len: 0,
        }
    }

    fn write(&mut self, frame: &[u8]) {
        match self {
            Append::Buffered(f) => f.write_all(frame).unwrap(),
            Append::Direct {
                file,
                stage,
                start,
                len,
            } => {
                let mut rest = frame;
                while !rest.is_empty() {
                    let n = rest.len().min(DIRECT_BLOCK - *len);
                    stage[*start + *len..*start + *len + n].copy_from_slice(&rest[..n]);
                    *len += n;
                    rest = &rest[n..];
                    if *len == DIRECT_BLOCK {
                        file.write_all(&stage[*start..*start + DIRECT_BLOCK])
                            .unwrap();
                        *len = 0;
                    }
                }
            }
        }
    }
}

/// The fixed header's type byte and the frame's total length, once the
/// buffer holds the whole header.
fn frame_len(b: &[u8]) -> Option<(u8, usize)> {
    let mut len = 0usize;
    for i in 0..4 {
        let byte = *b.get(1 + i)?;
        len |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((b[0], 2 + i + len));
        }
    }
    panic!("malformed remaining length");
}

fn u16_at(b: &[u8], i: usize) -> usize {
    usize::from(b[i]) << 8 | usize::from(b[i + 1])
}

/// The body of a frame: after the type byte and the remaining length.
fn body(frame: &[u8]) -> &[u8] {
    let n = frame[1..].iter().take_while(|b| *b & 0x80 != 0).count() + 1;
    &frame[1 + n..]
}

async fn connection(sock: TcpStream, state: Rc<RefCell<State>>) {
    sock.set_nodelay(true).unwrap();
    let (mut rd, wr) = sock.into_split();
    let wr: Writer = Rc::new(tokio::sync::Mutex::new(wr));
    let mut buf = BytesMut::with_capacity(256 * 1024);
    loop {
        while let Some((kind, len)) = frame_len(&buf).filter(|(_, l)| buf.len() >= *l) {
            let frame = buf.split_to(len).freeze();
            match kind >> 4 {
                1 => wr.lock().await.write_all(&[0x20, 2, 0, 0]).await.unwrap(),
                3 => {
                    let b = body(&frame);
                    let topic = &b[2..2 + u16_at(b, 0)];
                    let subs = state.borrow().subscribers.get(topic).cloned();
                    for s in subs.into_iter().flatten() {
                        // A subscriber gone mid-run is the load generator's
                        // business; the floor just stops writing to it.
                        let _ = s.lock().await.write_all(&frame).await;
                    }
                    if let Some(a) = state.borrow_mut().append.as_mut() {
                        a.write(&frame);
                    }
                    if (kind >> 1) & 3 == 1 {
                        let id = &b[2 + topic.len()..4 + topic.len()];
                        let ack = [0x40, 2, id[0], id[1]];
                        wr.lock().await.write_all(&ack).await.unwrap();
                    }
                }
                8 => {
                    let b = body(&frame);
                    let (id, mut rest) = (&b[..2], &b[2..]);
                    let mut granted = Vec::new();
                    while rest.len() >= 3 {
                        let n = u16_at(rest, 0);
                        let topic = rest[2..2 + n].to_vec();
                        granted.push(rest[2 + n]);
                        rest = &rest[3 + n..];
                        let mut st = state.borrow_mut();
                        st.subscribers.entry(topic).or_default().push(wr.clone());
                    }
                    let mut ack = vec![0x90, 2 + granted.len() as u8, id[0], id[1]];
                    ack.extend(granted);
                    wr.lock().await.write_all(&ack).await.unwrap();
                }
                12 => wr.lock().await.write_all(&[0xd0, 0]).await.unwrap(),
                14 => return,
                _ => {}
            }
        }
        buf.reserve(64 * 1024);
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    // Gone: no more writes to this connection.
    for subs in state.borrow_mut().subscribers.values_mut() {
        subs.retain(|s| !Rc::ptr_eq(s, &wr));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut state = State::default();
    let (mut path, mut direct) = (None, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--append" => path = Some(args.next().expect("--append FILE")),
            "--direct" => direct = true,
            _ => panic!("usage: mqtt-floor [--append FILE [--direct]]"),
        }
    }
    state.append = path.map(|p| Append::open(&p, direct));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
        let state = Rc::new(RefCell::new(state));
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            tokio::task::spawn_local(connection(sock, state.clone()));
        }
    });
}
