//! The SSRF suite of the file fetcher (SPEC §7.7 "A URL is untrusted peer
//! data"): a loopback HTTPS server (a certificate made here, rcgen) on
//! 127.0.0.2, the one address the test's policy allows, a decoy on
//! 127.0.0.1 at the same port that must never be reached, and a UDP DNS
//! responder the fetcher's resolver is pointed at. Every refusal is
//! asserted by its reason.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hickory_resolver::proto::rr::rdata::A;
use hickory_resolver::proto::rr::{RData, RecordType};
use rdv_agent::dns::Dns;
use rdv_agent::fetch::{AddressPolicy, DnsResolve, FetchError, Fetcher, Resolve};
use rdv_agent_core::file::{self, FileError, FilePart, UrlError};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

const ALLOWED: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const DECOY: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

// ---- the test PKI --------------------------------------------------------------

struct Pki {
    roots: RootCertStore,
    server: Arc<ServerConfig>,
}

/// A CA and a leaf it signed for the test names and both loopback
/// addresses, made here and never written anywhere.
fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "rdv fetch test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec![
        "files.test".to_string(),
        "rebind.test".to_string(),
        "evil.test".to_string(),
        "127.0.0.2".to_string(),
        "127.0.0.1".to_string(),
    ])
    .unwrap()
    .signed_by(&leaf_key, &ca, &ca_key)
    .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    Pki {
        roots,
        server: Arc::new(server),
    }
}

// ---- the HTTPS server ----------------------------------------------------------

/// One canned reply. `length: false` sends no Content-Length and ends the
/// body by closing the connection.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    length: bool,
}

fn ok(body: &[u8]) -> Reply {
    Reply {
        status: 200,
        headers: Vec::new(),
        body: body.to_vec(),
        length: true,
    }
}

fn redirect(to: &str) -> Reply {
    Reply {
        status: 302,
        headers: vec![
            ("Location".into(), to.into()),
            ("Set-Cookie".into(), "session=peer-set; Path=/".into()),
        ],
        body: Vec::new(),
        length: true,
    }
}

struct World {
    port: u16,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    /// Each request head the server read, lowercased.
    requests: Arc<Mutex<Vec<String>>>,
    /// Connections the decoy on 127.0.0.1 (same port) accepted.
    decoy: Arc<AtomicUsize>,
    dns: SocketAddr,
    /// A answers per name, one list per query (the last repeats).
    zone: Arc<Mutex<HashMap<String, Vec<Vec<Ipv4Addr>>>>>,
    /// A queries per name.
    queries: Arc<Mutex<HashMap<String, usize>>>,
    roots: RootCertStore,
}

impl World {
    async fn new() -> World {
        let pki = pki();
        // The real server on 127.0.0.2 and a decoy on 127.0.0.1 at the same
        // port: a connection to the wrong address lands on the decoy.
        let (listener, decoy_listener) = loop {
            let l = tokio::net::TcpListener::bind((ALLOWED, 0)).await.unwrap();
            let port = l.local_addr().unwrap().port();
            if let Ok(d) = tokio::net::TcpListener::bind((DECOY, port)).await {
                break (l, d);
            }
        };
        let port = listener.local_addr().unwrap().port();
        let decoy = Arc::new(AtomicUsize::new(0));
        let d2 = decoy.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = decoy_listener.accept().await {
                d2.fetch_add(1, Ordering::SeqCst);
                drop(s);
            }
        });
        let routes: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let acceptor = TlsAcceptor::from(pki.server.clone());
        let (r2, q2) = (routes.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, routes, requests) = (acceptor.clone(), r2.clone(), q2.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).to_lowercase();
                    let path = head
                        .lines()
                        .next()
                        .and_then(|l| l.split(' ').nth(1))
                        .unwrap_or("/")
                        .to_string();
                    requests.lock().unwrap().push(head);
                    let reply = routes.lock().unwrap().get(&path).cloned().unwrap_or(Reply {
                        status: 404,
                        headers: Vec::new(),
                        body: Vec::new(),
                        length: true,
                    });
                    let mut out = format!("HTTP/1.1 {} X\r\nConnection: close\r\n", reply.status);
                    for (k, v) in &reply.headers {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    if reply.length {
                        out.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
                    }
                    out.push_str("\r\n");
                    let _ = tls.write_all(out.as_bytes()).await;
                    let _ = tls.write_all(&reply.body).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        let zone: Arc<Mutex<HashMap<String, Vec<Vec<Ipv4Addr>>>>> = Arc::default();
        let queries: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let dns = dns_server(zone.clone(), queries.clone()).await;
        World {
            port,
            routes,
            requests,
            decoy,
            dns,
            zone,
            queries,
            roots: pki.roots,
        }
    }

    fn route(&self, path: &str, r: Reply) {
        self.routes.lock().unwrap().insert(path.into(), r);
    }

    fn name(&self, name: &str, answers: Vec<Vec<Ipv4Addr>>) {
        self.zone.lock().unwrap().insert(name.into(), answers);
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.port)
    }

    fn resolver(&self) -> Arc<dyn Resolve> {
        Arc::new(DnsResolve::new(&Dns::Server(self.dns)).unwrap().unwrap())
    }

    /// The fetcher under test: public addresses and exactly 127.0.0.2.
    fn fetcher(&self) -> Fetcher {
        Fetcher::with_roots(
            self.resolver(),
            AddressPolicy::allowing([ALLOWED]),
            self.roots.clone(),
        )
    }

    /// An encrypted file served at `path`, and its reference part at `url`.
    fn serve_file(&self, path: &str, plain: &[u8], url: &str) -> FilePart {
        let mut rng = rand_core::OsRng;
        let (cipher, meta) = file::seal_blob(plain, &mut rng).unwrap();
        self.route(path, ok(&cipher));
        file::reference_part(meta, url, Some("plan.pdf"), Some("application/pdf")).unwrap()
    }

    /// A file at files.test whose first URL is `path` (which redirects or
    /// misbehaves): the bytes live at /blob.
    fn file_via(&self, path: &str, plain: &[u8]) -> FilePart {
        self.name("files.test", vec![vec![Ipv4Addr::new(127, 0, 0, 2)]]);
        let mut p = self.serve_file("/blob", plain, &self.url("files.test", "/blob"));
        p.uri = Some(self.url("files.test", path));
        p
    }

    fn decoy_hits(&self) -> usize {
        self.decoy.load(Ordering::SeqCst)
    }
}

/// Answers A questions from `zone` (one answer list per query, the last
/// repeating, TTL 0), empty for AAAA, NXDOMAIN for other names.
async fn dns_server(
    zone: Arc<Mutex<HashMap<String, Vec<Vec<Ipv4Addr>>>>>,
    queries: Arc<Mutex<HashMap<String, usize>>>,
) -> SocketAddr {
    common::dns::serve(move |name, qtype| {
        let answers = zone.lock().unwrap().get(name).cloned()?;
        if qtype != RecordType::A {
            return Some(Vec::new());
        }
        let i = {
            let mut qs = queries.lock().unwrap();
            let c = qs.entry(name.to_string()).or_insert(0);
            *c += 1;
            *c - 1
        };
        let list = answers
            .get(i)
            .or(answers.last())
            .cloned()
            .unwrap_or_default();
        Some(list.into_iter().map(|ip| (RData::A(A(ip)), 0)).collect())
    })
    .await
}

fn refused_address(e: &FetchError) -> (IpAddr, &'static str) {
    match e {
        FetchError::SpecialAddress { ip, kind } => (*ip, kind),
        other => panic!("expected a special-address refusal, got {other:?}"),
    }
}

// ---- the suite -----------------------------------------------------------------

#[tokio::test]
async fn a_file_is_fetched_from_the_checked_address_without_credentials() {
    let w = World::new().await;
    w.name("files.test", vec![vec![Ipv4Addr::new(127, 0, 0, 2)]]);
    let part = w.serve_file("/blob", b"the Q4 plan", &w.url("files.test", "/blob"));
    let plain = w.fetcher().fetch(&part).await.unwrap();
    assert_eq!(plain, b"the Q4 plan");
    let reqs = w.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].contains("\r\naccept-encoding: identity\r\n"),
        "{}",
        reqs[0]
    );
    assert!(!reqs[0].contains("cookie:"));
    assert!(!reqs[0].contains("authorization:"));
    assert_eq!(w.decoy_hits(), 0);
    // The same server is refused under the real policy (loopback).
    let strict = Fetcher::with_roots(w.resolver(), AddressPolicy::public_only(), w.roots.clone());
    let e = strict.fetch(&part).await.unwrap_err();
    assert_eq!(refused_address(&e), (ALLOWED, "loopback"));
}

#[tokio::test]
async fn redirects_to_special_addresses_are_refused_before_connecting() {
    let w = World::new().await;
    let cases: Vec<(String, &str)> = vec![
        (w.url("127.0.0.1", "/blob"), "loopback"),
        (w.url("10.1.2.3", "/blob"), "private"),
        (w.url("[::ffff:127.0.0.1]", "/blob"), "loopback"),
        (w.url("[64:ff9b::7f00:1]", "/blob"), "NAT64"),
        (w.url("[2002:7f00:1::1]", "/blob"), "6to4"),
        (w.url("169.254.169.254", "/latest/meta-data"), "link-local"),
        (w.url("100.64.0.1", "/blob"), "shared address space (CGNAT)"),
        (w.url("[::1]", "/blob"), "loopback"),
    ];
    for (i, (to, kind)) in cases.iter().enumerate() {
        let path = format!("/r{i}");
        w.route(&path, redirect(to));
        let part = w.file_via(&path, b"secret");
        let e = w.fetcher().fetch(&part).await.unwrap_err();
        assert_eq!(refused_address(&e).1, *kind, "{to}");
    }
    assert_eq!(w.decoy_hits(), 0, "nothing reached 127.0.0.1");
}

#[tokio::test]
async fn a_name_that_resolves_inside_is_refused_after_resolving() {
    let w = World::new().await;
    w.name("evil.test", vec![vec![Ipv4Addr::new(10, 0, 0, 7)]]);
    w.route("/r", redirect(&w.url("evil.test", "/blob")));
    let part = w.file_via("/r", b"x");
    let e = w.fetcher().fetch(&part).await.unwrap_err();
    assert_eq!(
        refused_address(&e),
        (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)), "private")
    );
    // A name with one public-looking allowed address and one inside is
    // refused whole.
    w.name(
        "evil.test",
        vec![vec![
            Ipv4Addr::new(127, 0, 0, 2),
            Ipv4Addr::new(127, 0, 0, 1),
        ]],
    );
    let e = w.fetcher().fetch(&part).await.unwrap_err();
    assert_eq!(refused_address(&e), (DECOY, "loopback"));
    assert_eq!(w.decoy_hits(), 0);
}

#[tokio::test]
async fn a_dns_answer_that_changes_between_check_and_connect_cannot_move_it() {
    let w = World::new().await;
    // First answer: the allowed address; every later one: loopback.
    w.name(
        "rebind.test",
        vec![
            vec![Ipv4Addr::new(127, 0, 0, 2)],
            vec![Ipv4Addr::new(127, 0, 0, 1)],
        ],
    );
    let part = w.serve_file("/blob", b"the real file", &w.url("rebind.test", "/blob"));
    let plain = w.fetcher().fetch(&part).await.unwrap();
    assert_eq!(plain, b"the real file");
    // Resolved once, and connected to exactly what was checked: a second
    // resolution (a client library's own) would have gone to the decoy.
    assert_eq!(w.queries.lock().unwrap()["rebind.test"], 1);
    assert_eq!(w.decoy_hits(), 0);
    let again = w.resolver().resolve("rebind.test").await.unwrap();
    assert_eq!(again, vec![DECOY], "the responder did rebind");
    // And a fetch that now resolves to loopback is refused.
    let e = w.fetcher().fetch(&part).await.unwrap_err();
    assert_eq!(refused_address(&e), (DECOY, "loopback"));
    assert_eq!(w.decoy_hits(), 0);
}

#[tokio::test]
async fn at_most_three_redirects_and_no_cookie_follows_them() {
    let w = World::new().await;
    w.route("/a1", redirect("/a2"));
    w.route("/a2", redirect("/a3"));
    w.route("/a3", redirect("/blob"));
    let part = w.file_via("/a1", b"three hops");
    assert_eq!(w.fetcher().fetch(&part).await.unwrap(), b"three hops");
    let reqs = w.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 4);
    assert!(
        reqs.iter().all(|r| !r.contains("cookie:")),
        "a cookie set by a redirect is never sent back"
    );
    w.route("/b0", redirect("/a1"));
    let part = w.file_via("/b0", b"four hops");
    let e = w.fetcher().fetch(&part).await.unwrap_err();
    assert!(matches!(e, FetchError::TooManyRedirects), "{e:?}");
}

#[tokio::test]
async fn a_redirect_to_plain_http_is_refused() {
    let w = World::new().await;
    w.route(
        "/r",
        redirect(&format!("http://files.test:{}/blob", w.port)),
    );
    let part = w.file_via("/r", b"x");
    let e = w.fetcher().fetch(&part).await.unwrap_err();
    assert!(matches!(e, FetchError::Url(UrlError::NotHttps)), "{e:?}");
}

#[tokio::test]
async fn oversize_bodies_are_refused_while_reading() {
    let w = World::new().await;
    let part = w.file_via("/blob", b"small");
    let size = part.size() as usize;
    // Declared too long.
    w.route("/long", ok(&vec![0u8; size + 1]));
    let mut p = part.clone();
    p.uri = Some(w.url("files.test", "/long"));
    let e = w.fetcher().fetch(&p).await.unwrap_err();
    assert!(
        matches!(e, FetchError::TooLarge { cap } if cap == size as u64),
        "{e:?}"
    );
    // No length, ended by closing: counted while reading.
    w.route(
        "/stream",
        Reply {
            status: 200,
            headers: Vec::new(),
            body: vec![0u8; 1 << 20],
            length: false,
        },
    );
    p.uri = Some(w.url("files.test", "/stream"));
    let e = w.fetcher().fetch(&p).await.unwrap_err();
    assert!(matches!(e, FetchError::TooLarge { .. }), "{e:?}");
    // A file whose stated size is over our own cap is not fetched at all.
    let e = w.fetcher().with_cap(4).fetch(&part).await.unwrap_err();
    assert!(matches!(e, FetchError::TooLarge { cap: 4 }), "{e:?}");
    assert_eq!(w.requests.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_wrong_hash_fails_the_file() {
    let w = World::new().await;
    let part = w.file_via("/blob", b"genuine");
    let size = part.size() as usize;
    w.route("/other", ok(&vec![7u8; size]));
    let mut p = part.clone();
    p.uri = Some(w.url("files.test", "/other"));
    let e = w.fetcher().fetch(&p).await.unwrap_err();
    assert!(
        matches!(e, FetchError::File(FileError::HashMismatch)),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_wrong_plain_hash_fails_the_file() {
    let w = World::new().await;
    let part = w.file_via("/blob", b"genuine");
    let mut v = part.to_value();
    v["metadata"][rdv_proto::consts::EXT_FILES]["enc"]["plain_sha256"] =
        json!(file::sha256_hex(b"something else"));
    let lying = file::parse_part_value(&v).unwrap();
    let mut lying = lying;
    lying.uri = Some(w.url("files.test", "/blob"));
    let e = w.fetcher().fetch(&lying).await.unwrap_err();
    assert!(
        matches!(e, FetchError::File(FileError::PlainHashMismatch)),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_content_encoding_is_refused() {
    let w = World::new().await;
    let part = w.file_via("/blob", b"x");
    let body = w.routes.lock().unwrap()["/blob"].body.clone();
    w.route(
        "/gz",
        Reply {
            status: 200,
            headers: vec![("Content-Encoding".into(), "gzip".into())],
            body,
            length: true,
        },
    );
    let mut p = part.clone();
    p.uri = Some(w.url("files.test", "/gz"));
    let e = w.fetcher().fetch(&p).await.unwrap_err();
    assert!(matches!(e, FetchError::ContentEncoding), "{e:?}");
}
