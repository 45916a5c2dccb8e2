//! The file fetcher (SPEC §7.7 "A URL is untrusted peer data"): a file
//! reference's URL is fetched only by the owner's choice, for a task whose
//! start gate passed, and only:
//!
//! - over https, to an address that is not private, loopback, link-local
//!   or otherwise special-purpose (IPv4-mapped, NAT64 and 6to4 forms
//!   included), checked after resolving and after each redirect, with the
//!   connection made to exactly the address that was checked: we resolve
//!   once, check, and hand hyper a connected socket, so no library
//!   resolves again and a DNS answer that changes cannot move it;
//! - with at most 3 redirects; no cookies, no Authorization, no client
//!   certificate; `Accept-Encoding: identity`, and any Content-Encoding
//!   refused;
//! - reading at most the part's size and our own cap (25 MiB), enforced
//!   while reading; then sha256 is checked, then decryption and
//!   plain_sha256 (`rdv_agent_core::file::open_blob`).
//!
//! What is fetched is saved in the home's quarantine (`files/incoming/
//! <task>/`) under a name we derive, never the peer's, mode 600, without
//! execute permission, with `.quarantine` after an active extension. The
//! content stays untrusted whatever its hash (§5.6).
//!
//! The address policy and the resolver are values the caller passes, so a
//! test can allow exactly one loopback address for its server and point
//! the resolver at its own DNS server.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::header::{
    ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, HOST, LOCATION, USER_AGENT,
};
use hyper_util::rt::TokioIo;
use rdv_agent_core::file::{FileError, FilePart, UrlError, check_url};
use rdv_proto::consts::{
    FILES_FETCH_MAX_BYTES, FILES_FETCH_MAX_REDIRECTS, FILES_QUARANTINE_DIR, FILES_QUARANTINE_SUFFIX,
};
use rustls_pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use crate::dns::Dns;

/// How long a connection (TCP and TLS) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one whole fetch may take, redirects included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(120);
/// How many addresses one name may resolve to before the answer is refused.
pub const MAX_ADDRESSES: usize = 16;

/// Why a fetch was refused or failed. Never holds a key; URLs are not
/// repeated (they are peer data), only what the human needs to act.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// §7.7: a URL (the part's or a redirect's) that is not https, has no
    /// host, has userinfo or is too long.
    #[error("a URL refused (SPEC §7.7): {0}")]
    Url(UrlError),
    /// §7.7: never to a private, loopback, link-local or otherwise
    /// special-purpose address, after resolving and after each redirect.
    #[error("refused to connect to {ip} ({kind}, SPEC §7.7)")]
    SpecialAddress { ip: IpAddr, kind: &'static str },
    #[error("the name resolves to no address")]
    NoAddress,
    #[error("DNS: {0}")]
    Dns(String),
    /// §7.7: at most 3 redirects.
    #[error("more than {FILES_FETCH_MAX_REDIRECTS} redirects (SPEC §7.7)")]
    TooManyRedirects,
    #[error("a redirect without a usable Location")]
    BadRedirect,
    #[error("the server answered HTTP {0}")]
    Status(u16),
    /// §7.7: no content encodings.
    #[error("the server used a content encoding (SPEC §7.7: none is accepted)")]
    ContentEncoding,
    /// §7.7: at most the part's size and our own cap, enforced while reading.
    #[error("the file is larger than {cap} bytes (SPEC §7.7)")]
    TooLarge { cap: u64 },
    #[error("connecting failed: {0}")]
    Connect(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("the fetch timed out")]
    Timeout,
    /// The file has no URL (offered by direct transfer only).
    #[error("the file has no URL to fetch (only a direct-transfer offer)")]
    NoUrl,
    /// sha256, decryption or plain_sha256 failed (§7.7).
    #[error("{0}")]
    File(#[from] FileError),
    #[error("saving the file: {0}")]
    Save(String),
}

// ---- the address policy ------------------------------------------------------

/// The special-purpose kind of an address, or `None` for a public unicast
/// one. IPv4-mapped and IPv4-compatible IPv6 are judged as their IPv4;
/// NAT64 (64:ff9b::/96, 64:ff9b:1::/48) and 6to4 (2002::/16), which embed
/// an IPv4 address the network translates, are refused whole; IPv6 is
/// otherwise only global unicast (2000::/3) outside the special blocks.
pub fn special_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const BLOCKS: [([u8; 4], u32, &str); 17] = [
        ([0, 0, 0, 0], 8, "this network / unspecified"),
        ([10, 0, 0, 0], 8, "private"),
        ([100, 64, 0, 0], 10, "shared address space (CGNAT)"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([169, 254, 0, 0], 16, "link-local"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 0, 0, 0], 24, "IETF protocol assignments"),
        ([192, 0, 2, 0], 24, "documentation"),
        ([192, 31, 196, 0], 24, "AS112"),
        ([192, 52, 193, 0], 24, "AMT"),
        ([192, 88, 99, 0], 24, "6to4 relay anycast"),
        ([192, 168, 0, 0], 16, "private"),
        ([192, 175, 48, 0], 24, "AS112"),
        ([198, 18, 0, 0], 15, "benchmarking"),
        ([198, 51, 100, 0], 24, "documentation"),
        ([203, 0, 113, 0], 24, "documentation"),
        ([224, 0, 0, 0], 3, "multicast or reserved"),
    ];
    BLOCKS
        .iter()
        .find(|(n, b, _)| in_v4(ip, *n, *b))
        .map(|(_, _, k)| *k)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible): the IPv4 decides,
    // and a compatible one is refused anyway (deprecated, never routed).
    if let Some(v4) = ip.to_ipv4_mapped() {
        return special_v4(v4);
    }
    const BLOCKS: [([u16; 8], u32, &str); 14] = [
        ([0, 0, 0, 0, 0, 0, 0, 0], 96, "IPv4-compatible"),
        ([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "NAT64"),
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "NAT64 (local use)"),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only"),
        (
            [0x2001, 0, 0, 0, 0, 0, 0, 0],
            23,
            "IETF protocol assignments (Teredo, ORCHID)",
        ),
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
        ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4"),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
        ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "segment routing"),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique local"),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local"),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
        ([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, ""),
    ];
    for (net, bits, kind) in BLOCKS {
        if in_v6(ip, net, bits) {
            // 2000::/3 is the one block that is allowed.
            return (!kind.is_empty()).then_some(kind);
        }
    }
    Some("not global unicast")
}

/// Which addresses a fetch may connect to: public unicast only, plus the
/// exact addresses a caller allows (a test's own server). An allowed
/// address is compared in its canonical form (an IPv4-mapped IPv6 as its
/// IPv4), so allowing 127.0.0.2 allows nothing else on loopback.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allowed: Vec<IpAddr>,
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

impl AddressPolicy {
    /// §7.7: public addresses only.
    pub fn public_only() -> AddressPolicy {
        AddressPolicy::default()
    }

    /// Public addresses, and exactly these (tests).
    pub fn allowing(ips: impl IntoIterator<Item = IpAddr>) -> AddressPolicy {
        AddressPolicy {
            allowed: ips.into_iter().map(canonical).collect(),
        }
    }

    /// The address to connect to, or why not.
    pub fn check(&self, ip: IpAddr) -> Result<IpAddr, FetchError> {
        let c = canonical(ip);
        if self.allowed.contains(&c) {
            return Ok(c);
        }
        match special_kind(ip) {
            None => Ok(c),
            Some(kind) => Err(FetchError::SpecialAddress { ip, kind }),
        }
    }
}

// ---- resolving ----------------------------------------------------------------

/// A future a resolver returns.
pub type Resolving<'a> = Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, FetchError>> + Send + 'a>>;

/// Resolves a host name to addresses (injected, so tests use their own
/// DNS server). Called once per URL: what it returns is checked and one
/// of those exact addresses is connected to.
pub trait Resolve: Send + Sync {
    fn resolve<'a>(&'a self, host: &'a str) -> Resolving<'a>;
}

/// hickory, asking the system's resolvers or one server (`RDV_DNS_SERVER`).
pub struct DnsResolve(hickory_resolver::TokioResolver);

impl DnsResolve {
    /// `None` when DNS is off.
    pub fn new(dns: &Dns) -> crate::Result<Option<DnsResolve>> {
        Ok(dns.resolver()?.map(DnsResolve))
    }
}

impl Resolve for DnsResolve {
    fn resolve<'a>(&'a self, host: &'a str) -> Resolving<'a> {
        Box::pin(async move {
            // Fully qualified: no search domain is appended.
            let fqdn = format!("{}.", host.trim_end_matches('.'));
            match self.0.lookup_ip(fqdn.as_str()).await {
                Ok(l) => Ok(l.iter().take(MAX_ADDRESSES + 1).collect()),
                Err(e) if e.is_no_records_found() || e.is_nx_domain() => Ok(Vec::new()),
                Err(e) => Err(FetchError::Dns(e.to_string())),
            }
        })
    }
}

/// No DNS (`RDV_DNS_SERVER=off`): every name fails to resolve; an inline
/// file or a URL with an address still works.
pub struct DnsOff;

impl Resolve for DnsOff {
    fn resolve<'a>(&'a self, _host: &'a str) -> Resolving<'a> {
        Box::pin(async { Err(FetchError::Dns("DNS is off (RDV_DNS_SERVER=off)".into())) })
    }
}

// ---- fetching -------------------------------------------------------------------

/// Fetches file references by the rules of §7.7.
pub struct Fetcher {
    resolver: Arc<dyn Resolve>,
    policy: AddressPolicy,
    tls: Arc<ClientConfig>,
    cap: u64,
}

impl Fetcher {
    /// The public web's roots (Mozilla's, webpki-roots).
    pub fn new(resolver: Arc<dyn Resolve>, policy: AddressPolicy) -> Fetcher {
        let roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        Fetcher::with_roots(resolver, policy, roots)
    }

    /// Other roots (tests: a certificate made for a loopback server). No
    /// client certificate, ever.
    pub fn with_roots(
        resolver: Arc<dyn Resolve>,
        policy: AddressPolicy,
        roots: RootCertStore,
    ) -> Fetcher {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = match ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
        {
            Ok(b) => b.with_root_certificates(roots).with_no_client_auth(),
            // ring supports the default versions; unreachable in practice,
            // and then no fetch can succeed.
            Err(_) => ClientConfig::builder()
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
        };
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Fetcher {
            resolver,
            policy,
            tls: Arc::new(cfg),
            cap: FILES_FETCH_MAX_BYTES,
        }
    }

    /// A lower cap than the default 25 MiB.
    pub fn with_cap(mut self, cap: u64) -> Fetcher {
        self.cap = cap.min(FILES_FETCH_MAX_BYTES);
        self
    }

    /// §7.7: the file's bytes, from its URL then its mirrors, checked
    /// (size, sha256, then decryption and plain_sha256); returns the
    /// plaintext. Inline files need no fetch. A hash or decryption failure
    /// fails the file (no further mirror); a refused or failed connection
    /// tries the next URL, and the first URL's error is the one reported.
    pub async fn fetch(&self, part: &FilePart) -> Result<Vec<u8>, FetchError> {
        if let Some(b) = part.inline_bytes() {
            return Ok(part.open(&b)?);
        }
        let Some(meta) = &part.meta else {
            return Err(FetchError::File(FileError::NoHash));
        };
        let urls = part.urls();
        if urls.is_empty() {
            return Err(FetchError::NoUrl);
        }
        let cap = meta.size.min(self.cap);
        if meta.size > self.cap {
            return Err(FetchError::TooLarge { cap: self.cap });
        }
        let mut first: Option<FetchError> = None;
        for u in urls {
            match tokio::time::timeout(FETCH_TIMEOUT, self.get(&u, cap)).await {
                Ok(Ok(bytes)) => return Ok(part.open(&bytes)?),
                Ok(Err(e)) => {
                    if first.is_none() {
                        first = Some(e);
                    }
                }
                Err(_) => {
                    if first.is_none() {
                        first = Some(FetchError::Timeout);
                    }
                }
            }
        }
        Err(first.unwrap_or(FetchError::NoUrl))
    }

    /// One URL, following at most 3 redirects, each checked like the first.
    pub async fn get(&self, url: &str, cap: u64) -> Result<Vec<u8>, FetchError> {
        let mut url = check_url(url).map_err(FetchError::Url)?;
        let mut redirects = 0usize;
        loop {
            match self.get_once(&url, cap).await? {
                Got::Body(b) => return Ok(b),
                Got::Redirect(loc) => {
                    redirects += 1;
                    if redirects > FILES_FETCH_MAX_REDIRECTS {
                        return Err(FetchError::TooManyRedirects);
                    }
                    let next = url.join(&loc).map_err(|_| FetchError::BadRedirect)?;
                    url = check_url(next.as_str()).map_err(FetchError::Url)?;
                }
            }
        }
    }

    /// The checked address to connect to for `url`.
    async fn address(&self, url: &url::Url) -> Result<IpAddr, FetchError> {
        let ips = match url.host() {
            Some(url::Host::Ipv4(v4)) => vec![IpAddr::V4(v4)],
            Some(url::Host::Ipv6(v6)) => vec![IpAddr::V6(v6)],
            Some(url::Host::Domain(d)) => self.resolver.resolve(d).await?,
            None => return Err(FetchError::Url(UrlError::NoHost)),
        };
        if ips.is_empty() {
            return Err(FetchError::NoAddress);
        }
        if ips.len() > MAX_ADDRESSES {
            return Err(FetchError::Dns("too many addresses".into()));
        }
        // Every address the name has must pass: a name that also points
        // inside is refused, whichever address a connect would pick.
        let mut checked = Vec::with_capacity(ips.len());
        for ip in ips {
            checked.push(self.policy.check(ip)?);
        }
        Ok(checked[0])
    }

    async fn get_once(&self, url: &url::Url, cap: u64) -> Result<Got, FetchError> {
        let ip = self.address(url).await?;
        let port = url.port_or_known_default().unwrap_or(443);
        let tcp = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect(SocketAddr::new(ip, port)),
        )
        .await
        .map_err(|_| FetchError::Timeout)?
        .map_err(|e| FetchError::Connect(e.to_string()))?;
        let name = match url.host() {
            Some(url::Host::Domain(d)) => ServerName::try_from(d.to_string())
                .map_err(|_| FetchError::Url(UrlError::NoHost))?,
            _ => ServerName::IpAddress(ip.into()),
        };
        let tls = tokio::time::timeout(
            CONNECT_TIMEOUT,
            TlsConnector::from(self.tls.clone()).connect(name, tcp),
        )
        .await
        .map_err(|_| FetchError::Timeout)?
        .map_err(|e| FetchError::Tls(e.to_string()))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| FetchError::Http(e.to_string()))?;
        let driver = tokio::spawn(conn);
        let host = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        let mut target = url.path().to_string();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        // No cookies, no Authorization, no credentials of any kind.
        let req = hyper::Request::get(target)
            .header(HOST, host)
            .header(ACCEPT_ENCODING, "identity")
            .header(USER_AGENT, "rdv")
            .body(Empty::<Bytes>::new())
            .map_err(|e| FetchError::Http(e.to_string()))?;
        let got = read_response(sender.send_request(req).await, cap).await;
        driver.abort();
        got
    }
}

/// What one request gave.
enum Got {
    Body(Vec<u8>),
    Redirect(String),
}

async fn read_response(
    resp: Result<hyper::Response<hyper::body::Incoming>, hyper::Error>,
    cap: u64,
) -> Result<Got, FetchError> {
    let resp = resp.map_err(|e| FetchError::Http(e.to_string()))?;
    let status = resp.status();
    if status.is_redirection() {
        return match resp.headers().get(LOCATION).and_then(|l| l.to_str().ok()) {
            Some(l) if matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) => {
                Ok(Got::Redirect(l.to_string()))
            }
            _ => Err(FetchError::BadRedirect),
        };
    }
    if !status.is_success() {
        return Err(FetchError::Status(status.as_u16()));
    }
    // §7.7: no content encodings (identity only).
    for v in resp.headers().get_all(CONTENT_ENCODING) {
        let ok = v
            .to_str()
            .is_ok_and(|s| s.trim().eq_ignore_ascii_case("identity"));
        if !ok {
            return Err(FetchError::ContentEncoding);
        }
    }
    if let Some(n) = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        && n > cap
    {
        return Err(FetchError::TooLarge { cap });
    }
    let mut body = resp.into_body();
    let mut out: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| FetchError::Http(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if out.len() as u64 + data.len() as u64 > cap {
                return Err(FetchError::TooLarge { cap });
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Got::Body(out))
}

// ---- the quarantine ---------------------------------------------------------------

/// Extensions kept as they are: formats that do not run when opened.
/// Any other extension is active and gets `.quarantine` after it.
pub const INERT_EXTENSIONS: [&str; 16] = [
    "pdf", "txt", "md", "csv", "json", "png", "jpg", "jpeg", "gif", "webp", "ics", "docx", "xlsx",
    "pptx", "odt", "ods",
];

/// The name a fetched file is saved under (§7.7: derived, never the
/// peer's): the first 16 hex digits of its sha256, the extension of its
/// sanitized display name when that is 1–8 ASCII letters or digits, and
/// `.quarantine` after any extension that is not known to be inert.
pub fn quarantine_name(part: &FilePart) -> String {
    let stem: String = part.sha256().chars().take(16).collect();
    let ext = part
        .name
        .as_deref()
        .and_then(|n| n.rsplit_once('.'))
        .map(|(_, e)| e.to_ascii_lowercase())
        .filter(|e| (1..=8).contains(&e.len()) && e.bytes().all(|b| b.is_ascii_alphanumeric()));
    match ext {
        Some(e) if INERT_EXTENSIONS.contains(&e.as_str()) => format!("{stem}.{e}"),
        Some(e) => format!("{stem}.{e}{FILES_QUARANTINE_SUFFIX}"),
        None => format!("{stem}{FILES_QUARANTINE_SUFFIX}"),
    }
}

/// Saves a checked file under `home/files/incoming/<task>/` (directories
/// mode 700, the file mode 600: no execute), replacing an earlier copy.
/// `task_id` must be a UUID (it names a directory).
pub fn save_quarantined(
    home: &Path,
    task_id: &str,
    part: &FilePart,
    plain: &[u8],
) -> Result<PathBuf, FetchError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if !rdv_agent_core::a2a::is_uuid(task_id) {
        return Err(FetchError::Save("a task id that is not a UUID".into()));
    }
    let dir = home.join(FILES_QUARANTINE_DIR).join(task_id);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| FetchError::Save(e.to_string()))?;
    let path = dir.join(quarantine_name(part));
    // A link or an earlier copy goes; create_new never follows a link.
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(FetchError::Save(e.to_string())),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| FetchError::Save(e.to_string()))?;
    f.write_all(plain)
        .and_then(|()| f.sync_all())
        .map_err(|e| FetchError::Save(e.to_string()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kind(s: &str) -> Option<&'static str> {
        special_kind(s.parse().unwrap())
    }

    #[test]
    fn special_purpose_addresses_are_refused_and_public_ones_pass() {
        for (ip, want) in [
            ("0.0.0.0", "this network / unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared address space (CGNAT)"),
            ("100.127.255.255", "shared address space (CGNAT)"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("192.0.0.170", "IETF protocol assignments"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("192.88.99.1", "6to4 relay anycast"),
            ("224.0.0.1", "multicast or reserved"),
            ("240.0.0.1", "multicast or reserved"),
            ("255.255.255.255", "multicast or reserved"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("64:ff9b::7f00:1", "NAT64"),
            ("64:ff9b::808:808", "NAT64"),
            ("64:ff9b:1::1", "NAT64 (local use)"),
            ("2002:7f00:1::1", "6to4"),
            ("2002:0808:0808::1", "6to4"),
            ("2001::1", "IETF protocol assignments (Teredo, ORCHID)"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("fe80::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("100::1", "discard-only"),
            ("4000::1", "not global unicast"),
        ] {
            assert_eq!(kind(ip), Some(want), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "::ffff:8.8.8.8",
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
        ] {
            assert_eq!(kind(ip), None, "{ip}");
        }
    }

    #[test]
    fn a_policy_allows_exactly_the_addresses_it_names() {
        let p = AddressPolicy::allowing(["127.0.0.2".parse().unwrap()]);
        assert!(p.check("127.0.0.2".parse().unwrap()).is_ok());
        assert!(p.check("::ffff:127.0.0.2".parse().unwrap()).is_ok());
        for ip in [
            "127.0.0.1",
            "127.0.0.3",
            "::1",
            "::ffff:127.0.0.1",
            "10.0.0.1",
        ] {
            assert!(
                matches!(
                    p.check(ip.parse().unwrap()),
                    Err(FetchError::SpecialAddress { .. })
                ),
                "{ip}"
            );
        }
        assert!(
            AddressPolicy::public_only()
                .check("127.0.0.2".parse().unwrap())
                .is_err()
        );
    }

    fn part(name: Option<&str>) -> FilePart {
        let mut p = rdv_agent_core::file::inline_part(b"hello", None, None).unwrap();
        p.name = name.map(str::to_string);
        p
    }

    #[test]
    fn quarantine_names_are_derived_and_active_extensions_suffixed() {
        let sha16: String = part(None).sha256().chars().take(16).collect();
        assert_eq!(
            quarantine_name(&part(Some("plan.pdf"))),
            format!("{sha16}.pdf")
        );
        assert_eq!(
            quarantine_name(&part(Some("run.sh"))),
            format!("{sha16}.sh.quarantine")
        );
        assert_eq!(
            quarantine_name(&part(Some("invoice.pdf.exe"))),
            format!("{sha16}.exe.quarantine")
        );
        assert_eq!(
            quarantine_name(&part(Some("page.HTML"))),
            format!("{sha16}.html.quarantine")
        );
        assert_eq!(
            quarantine_name(&part(Some("noext"))),
            format!("{sha16}.quarantine")
        );
        assert_eq!(quarantine_name(&part(None)), format!("{sha16}.quarantine"));
    }

    #[test]
    fn saved_files_are_mode_600_under_the_tasks_quarantine() {
        use std::os::unix::fs::PermissionsExt;
        let home = std::env::temp_dir().join(format!("rdv-fetch-{}", std::process::id()));
        let task = "3f9a0000-0000-4000-8000-000000000001";
        let p = save_quarantined(&home, task, &part(Some("../../run.sh")), b"hello").unwrap();
        assert!(p.starts_with(home.join("files/incoming").join(task)));
        assert!(
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .ends_with(".sh.quarantine")
        );
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), b"hello");
        // Saved again: replaced, still 600.
        let p2 = save_quarantined(&home, task, &part(Some("run.sh")), b"hello").unwrap();
        assert_eq!(p, p2);
        assert!(matches!(
            save_quarantined(&home, "../x", &part(None), b"x"),
            Err(FetchError::Save(_))
        ));
        std::fs::remove_dir_all(&home).unwrap();
    }
}
