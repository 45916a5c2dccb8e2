//! The SMTP listener (issue #4 "Inbound"): forwarded mail in, through the
//! same gate and store path as `POST /v1/inbound` (`crate::delivery`).
//!
//! Commands are parsed by `smtp-proto`; the session state machine is ours
//! (RFC 5321): EHLO/HELO, MAIL FROM, one RCPT TO (a registered mailbox, its
//! gateway address, or an opt-out address: `flows::resolve_recipient`; a
//! gateway address also takes forwarding confirmations, `forwarding`),
//! DATA with dot-unstuffing, RSET, NOOP, VRFY (252), QUIT. Bounds: command
//! lines of [`MAX_LINE`] bytes, `SIZE` advertised and enforced while DATA is
//! read (nothing past the bound is kept), a timeout per command line and per
//! DATA chunk, a timeout on the whole session, a cap on concurrent sessions,
//! and a cap on bad commands. The connecting IP, HELO name and envelope
//! sender become the [`SmtpSession`] verify mode checks SPF against.
//! Nothing of a message or an envelope reaches the log: outcomes and codes.
//! STARTTLS (RFC 3207, rustls) is offered when a certificate is configured;
//! plaintext pipelined after it is discarded, and the session starts over.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::flows::Recipient;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use smtp_proto::request::receiver::{DataReceiver, DummyDataReceiver};
use smtp_proto::{Error as ProtoError, Request};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;

use crate::auth::SmtpSession;
use crate::config::{Config, SmtpRefusals, UnknownRecipients};
use crate::delivery::Delivery;
use crate::error::Error;
use crate::state::AppState;
use crate::verdict::Refusal;

/// Longest command line, CRLF included (RFC 5321 §4.5.3.1.4 says 512; MAIL
/// parameters extend it, so some slack).
pub const MAX_LINE: usize = 2048;
/// Bad commands tolerated in one session before it is closed.
pub const MAX_BAD_COMMANDS: u32 = 20;

/// The session's bounds, from the configuration.
#[derive(Debug, Clone)]
struct Bounds {
    hostname: String,
    max_bytes: usize,
    command_timeout: Duration,
    session_timeout: Duration,
    refusals: SmtpRefusals,
    unknown: UnknownRecipients,
}

/// A session's byte stream: plain TCP, or TLS after STARTTLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = BufReader<Box<dyn Io>>;

/// The STARTTLS acceptor of a configuration: `None` when no certificate is
/// configured. Errors name the file, never its content.
pub fn tls_acceptor(cfg: &Config) -> Result<Option<TlsAcceptor>, Error> {
    let (Some(cert), Some(key)) = (&cfg.smtp_tls_cert_file, &cfg.smtp_tls_key_file) else {
        return Ok(None);
    };
    let bad = |what: &str, path: &std::path::Path, e: &dyn std::fmt::Display| {
        Error::Config(format!("{what} {}: {e}", path.display()))
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("smtp_tls_cert_file", cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("smtp_tls_cert_file", cert, &e))?;
    if certs.is_empty() {
        return Err(bad("smtp_tls_cert_file", cert, &"no certificate"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("smtp_tls_key_file", key, &e))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| Error::Config(format!("smtp tls: {e}")))?;
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// Serves SMTP on `listener` until `stop` turns true, offering STARTTLS
/// when `tls` is set. Sessions over `smtp_max_sessions` are answered 421
/// and closed.
pub fn spawn(
    listener: TcpListener,
    state: AppState,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let cfg = state.config();
    let sessions = Arc::new(Semaphore::new(cfg.smtp_max_sessions));
    let bounds = Bounds {
        hostname: cfg.smtp_hostname.clone(),
        max_bytes: cfg.max_mail_bytes,
        command_timeout: Duration::from_secs(cfg.smtp_command_timeout_secs),
        session_timeout: Duration::from_secs(cfg.smtp_session_timeout_secs),
        refusals: cfg.smtp_refusals,
        unknown: cfg.smtp_unknown_recipients,
    };
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.wait_for(|s| *s) => break,
            };
            let (sock, peer) = match accepted {
                Ok(x) => {
                    // Replies are small and each waits for the client's next
                    // command: send them at once (no Nagle delay).
                    let _ = x.0.set_nodelay(true);
                    x
                }
                Err(e) => {
                    // Out of descriptors and the like: back off a little.
                    tracing::warn!(error = %e, "smtp accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let bounds = bounds.clone();
            match sessions.clone().try_acquire_owned() {
                Ok(permit) => {
                    let state = state.clone();
                    let stop = stop.clone();
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        serve_session(sock, peer, &state, &bounds, tls, stop).await;
                        drop(permit);
                    });
                }
                Err(_) => {
                    metrics::counter!("rdv_gateway_smtp_sessions_refused_total").increment(1);
                    tokio::spawn(async move {
                        let mut sock = sock;
                        let _ = tokio::time::timeout(
                            bounds.command_timeout,
                            sock.write_all(b"421 4.3.2 Too many sessions, try again later\r\n"),
                        )
                        .await;
                    });
                }
            }
        }
    })
}

/// One session, bounded in time as a whole, cut short by shutdown.
async fn serve_session(
    sock: TcpStream,
    peer: SocketAddr,
    state: &AppState,
    bounds: &Bounds,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    let mut stream: Option<Stream> = Some(BufReader::new(Box::new(sock)));
    let end = {
        let run = Session {
            stream: &mut stream,
            state,
            bounds,
            tls: tls.as_ref(),
            secure: false,
            client_ip: peer.ip(),
        }
        .run();
        tokio::select! {
            r = tokio::time::timeout(bounds.session_timeout, run) => match r {
                Ok(end) => end,
                Err(_) => End::Reply("421 4.4.2 Session too long, closing"),
            },
            _ = stop.wait_for(|s| *s) => End::Reply("421 4.3.2 Shutting down"),
        }
    };
    // None: cut off inside the TLS handshake; nothing to say.
    let Some(io) = stream.as_mut() else { return };
    if let End::Reply(text) = end {
        let line = format!("{text}\r\n");
        let _ = tokio::time::timeout(bounds.command_timeout, async {
            io.write_all(line.as_bytes()).await?;
            io.flush().await
        })
        .await;
    }
    let _ = tokio::time::timeout(bounds.command_timeout, io.shutdown()).await;
}

/// How a session ended.
enum End {
    /// Closed (QUIT answered, the client went away, or a write failed).
    Closed,
    /// Close with this final reply (a 421).
    Reply(&'static str),
}

/// The envelope of the transaction in progress.
struct Envelope {
    /// The reverse-path; empty for the null sender.
    mail_from: String,
    /// The one accepted recipient.
    rcpt: Option<Rcpt>,
}

/// An accepted recipient: someone, or (`smtp_unknown_recipients =
/// "accept"`) no one, whose mail is read and dropped.
#[derive(Clone)]
enum Rcpt {
    Known(Recipient),
    /// No agent: the address, when it is an email address.
    Nobody(Option<rdv_proto::Address>),
}

struct Session<'a> {
    stream: &'a mut Option<Stream>,
    state: &'a AppState,
    bounds: &'a Bounds,
    tls: Option<&'a TlsAcceptor>,
    /// Inside TLS already.
    secure: bool,
    client_ip: IpAddr,
}

/// What reading a command line gave.
enum Line {
    Ok,
    TooLong,
    Eof,
}

/// What reading DATA gave.
enum Data {
    Complete,
    TooLarge,
    Eof,
}

impl Session<'_> {
    fn io(&mut self) -> Result<&mut Stream, End> {
        self.stream.as_mut().ok_or(End::Closed)
    }

    async fn reply(&mut self, text: &str) -> Result<(), End> {
        let limit = self.bounds.command_timeout;
        let io = self.io()?;
        // One write per reply: two small writes would wait on Nagle's
        // algorithm for the client's delayed ACK (~40 ms a command).
        let line = format!("{text}\r\n");
        let write = async {
            io.write_all(line.as_bytes()).await?;
            io.flush().await
        };
        match tokio::time::timeout(limit, write).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(End::Closed),
        }
    }

    async fn run(mut self) -> End {
        match self.run_inner().await {
            Ok(()) => End::Closed,
            Err(e) => e,
        }
    }

    async fn run_inner(&mut self) -> Result<(), End> {
        let greeting = format!("220 {} ESMTP rdv-probe-gateway", self.bounds.hostname);
        self.reply(&greeting).await?;
        let mut helo: Option<String> = None;
        let mut env: Option<Envelope> = None;
        let mut line = Vec::with_capacity(256);
        let mut bad = 0u32;
        loop {
            match tokio::time::timeout(
                self.bounds.command_timeout,
                read_line(self.io()?, &mut line, MAX_LINE),
            )
            .await
            {
                Err(_) => return Err(End::Reply("421 4.4.2 Timeout, closing")),
                Ok(Err(_)) | Ok(Ok(Line::Eof)) => return Ok(()),
                Ok(Ok(Line::TooLong)) => {
                    bad += 1;
                    if bad > MAX_BAD_COMMANDS {
                        return Err(End::Reply("421 4.7.0 Too many errors, closing"));
                    }
                    self.reply("500 5.5.2 Line too long").await?;
                    continue;
                }
                Ok(Ok(Line::Ok)) => {}
            }
            let parsed = Request::parse(&mut line.iter()).map(Request::into_owned);
            let ok = match parsed {
                Ok(Request::Ehlo { host }) => {
                    helo = Some(clip(host));
                    env = None;
                    let starttls = if self.tls.is_some() && !self.secure {
                        "250-STARTTLS\r\n"
                    } else {
                        ""
                    };
                    let r = format!(
                        "250-{}\r\n250-SIZE {}\r\n250-8BITMIME\r\n{starttls}250 ENHANCEDSTATUSCODES",
                        self.bounds.hostname, self.bounds.max_bytes
                    );
                    self.reply(&r).await?;
                    true
                }
                Ok(Request::Helo { host }) => {
                    helo = Some(clip(host));
                    env = None;
                    let r = format!("250 {}", self.bounds.hostname);
                    self.reply(&r).await?;
                    true
                }
                Ok(Request::Mail { from }) => {
                    if helo.is_none() {
                        self.reply("503 5.5.1 Send EHLO or HELO first").await?;
                        false
                    } else if env.is_some() {
                        self.reply("503 5.5.1 Nested MAIL command").await?;
                        false
                    } else if from.size > self.bounds.max_bytes {
                        self.reply("552 5.3.4 Message size exceeds fixed maximum message size")
                            .await?;
                        true
                    } else {
                        env = Some(Envelope {
                            mail_from: clip(from.address),
                            rcpt: None,
                        });
                        self.reply("250 2.1.0 OK").await?;
                        true
                    }
                }
                Ok(Request::Rcpt { to }) => match &mut env {
                    None => {
                        self.reply("503 5.5.1 Send MAIL first").await?;
                        false
                    }
                    Some(e) if e.rcpt.is_some() => {
                        self.reply("452 4.5.3 Too many recipients: one per message")
                            .await?;
                        true
                    }
                    Some(e) => {
                        // A proved mailbox, its gateway address, or an
                        // opt-out address (flows::resolve_recipient).
                        match crate::flows::resolve_recipient(self.state, &to.address).await {
                            Ok(Some(r)) => {
                                e.rcpt = Some(Rcpt::Known(r));
                                self.reply("250 2.1.5 OK").await?;
                            }
                            Ok(None) if self.bounds.unknown == UnknownRecipients::Accept => {
                                // §5.2.1 "Silence": answered as a known one.
                                e.rcpt =
                                    Some(Rcpt::Nobody(rdv_proto::Address::parse(&to.address).ok()));
                                self.reply("250 2.1.5 OK").await?;
                            }
                            Ok(None) => {
                                self.reply("550 5.1.1 No such mailbox here").await?;
                            }
                            Err(err) => {
                                tracing::error!(error = %err, "smtp recipient lookup failed");
                                self.reply("451 4.3.0 Temporary failure, try again later")
                                    .await?;
                            }
                        }
                        true
                    }
                },
                Ok(Request::Data) => {
                    let Some((mail_from, rcpt)) = env
                        .as_ref()
                        .and_then(|e| e.rcpt.clone().map(|r| (e.mail_from.clone(), r)))
                    else {
                        self.reply("503 5.5.1 Send RCPT first").await?;
                        bad += 1;
                        if bad > MAX_BAD_COMMANDS {
                            return Err(End::Reply("421 4.7.0 Too many errors, closing"));
                        }
                        continue;
                    };
                    env = None;
                    self.reply("354 Start mail input; end with <CRLF>.<CRLF>")
                        .await?;
                    let mut raw = Vec::new();
                    let mut peak = 0;
                    let (limit, max) = (self.bounds.command_timeout, self.bounds.max_bytes);
                    match read_data(self.io()?, &mut raw, &mut peak, max, limit).await {
                        Err(_) => return Err(End::Reply("421 4.4.2 Timeout, closing")),
                        Ok(Data::Eof) => return Ok(()),
                        Ok(Data::TooLarge) => {
                            metrics::counter!("rdv_gateway_inbound_total", "outcome" => "refused", "refusal" => Refusal::TooLarge.code())
                                .increment(1);
                            tracing::info!(
                                refusal = Refusal::TooLarge.code(),
                                smtp = true,
                                "inbound refused"
                            );
                            self.reply("552 5.3.4 Message size exceeds fixed maximum message size")
                                .await?;
                        }
                        Ok(Data::Complete) if matches!(rcpt, Rcpt::Nobody(_)) => {
                            // No agent behind it: the gate and its limits
                            // run as for a registered mailbox (a flooding
                            // sender meets the same 451), nothing is
                            // queued, and the answer is an admitted one's.
                            let out = match &rcpt {
                                Rcpt::Nobody(Some(addr)) => {
                                    let session = SmtpSession {
                                        client_ip: self.client_ip,
                                        helo: helo.clone().unwrap_or_default(),
                                        mail_from,
                                    };
                                    self.state.deliver_nowhere(addr, &raw, Some(&session)).await
                                }
                                _ => Err(Delivery::Refused(Refusal::NotForMailbox)),
                            };
                            drop(raw);
                            let r = data_reply(&out, self.bounds.refusals, self.bounds.unknown);
                            self.reply(&r).await?;
                        }
                        Ok(Data::Complete) if matches!(rcpt, Rcpt::Known(Recipient::OptOut(_))) => {
                            // Opt-out mail: the content is read (bounded)
                            // and discarded; the opt-out id is the token's.
                            drop(raw);
                            let Rcpt::Known(Recipient::OptOut(id)) = &rcpt else {
                                continue;
                            };
                            let r = match crate::flows::record_optout(self.state, id).await {
                                Ok(()) => "250 2.0.0 Opt-out recorded",
                                Err(err) => {
                                    tracing::error!(error = %err, "smtp opt-out failed");
                                    "451 4.3.0 Temporary failure, try again later"
                                }
                            };
                            self.reply(r).await?;
                        }
                        Ok(Data::Complete) => {
                            let session = SmtpSession {
                                client_ip: self.client_ip,
                                helo: helo.clone().unwrap_or_default(),
                                mail_from,
                            };
                            let Rcpt::Known(rcpt) = &rcpt else {
                                continue;
                            };
                            let out = match rcpt {
                                Recipient::Mailbox(mb) => self
                                    .state
                                    .deliver(mb, &raw, Some(&session))
                                    .await
                                    .map(|d| d.seq),
                                // Its gateway address: forwarding
                                // confirmations too (crate::forwarding).
                                Recipient::Gateway(mb) => {
                                    self.state.deliver_gateway(mb, &raw, Some(&session)).await
                                }
                                Recipient::OptOut(_) => continue,
                            };
                            drop(raw);
                            let r = data_reply(&out, self.bounds.refusals, self.bounds.unknown);
                            self.reply(&r).await?;
                        }
                    }
                    true
                }
                Ok(Request::Rset) => {
                    env = None;
                    self.reply("250 2.0.0 OK").await?;
                    true
                }
                Ok(Request::Noop { .. }) => {
                    self.reply("250 2.0.0 OK").await?;
                    true
                }
                Ok(Request::Vrfy { .. }) => {
                    self.reply("252 2.5.0 Cannot VRFY user").await?;
                    true
                }
                Ok(Request::Quit) => {
                    let r = format!("221 2.0.0 {} closing", self.bounds.hostname);
                    self.reply(&r).await?;
                    return Ok(());
                }
                Ok(Request::StartTls) if self.tls.is_some() => {
                    if self.secure {
                        self.reply("503 5.5.1 TLS already active").await?;
                        false
                    } else {
                        self.start_tls().await?;
                        // RFC 3207 §4.2: everything learnt before is forgotten.
                        helo = None;
                        env = None;
                        true
                    }
                }
                Ok(_) => {
                    // STARTTLS without a certificate, AUTH, BDAT, LHLO,
                    // EXPN, HELP, ETRN, ATRN, BURL.
                    self.reply("502 5.5.1 Command not implemented").await?;
                    false
                }
                Err(e) => {
                    let r = match e {
                        ProtoError::UnknownCommand => "500 5.5.1 Unknown command",
                        ProtoError::InvalidSenderAddress => "501 5.1.7 Bad sender address syntax",
                        ProtoError::InvalidRecipientAddress => {
                            "501 5.1.3 Bad recipient address syntax"
                        }
                        ProtoError::InvalidParameter { .. }
                        | ProtoError::UnsupportedParameter { .. } => {
                            "555 5.5.4 Parameter not recognized or not implemented"
                        }
                        _ => "501 5.5.2 Syntax error",
                    };
                    self.reply(r).await?;
                    false
                }
            };
            if !ok {
                bad += 1;
                if bad > MAX_BAD_COMMANDS {
                    return Err(End::Reply("421 4.7.0 Too many errors, closing"));
                }
            }
        }
    }
}

impl Session<'_> {
    /// Answers STARTTLS and swaps the stream for TLS. Plaintext the client
    /// pipelined after the command goes with the old buffer (RFC 3207 §5:
    /// no command injection). A failed handshake ends the session.
    async fn start_tls(&mut self) -> Result<(), End> {
        let Some(acceptor) = self.tls.cloned() else {
            return Err(End::Closed);
        };
        self.reply("220 2.0.0 Ready to start TLS").await?;
        let plain = self.stream.take().ok_or(End::Closed)?.into_inner();
        match tokio::time::timeout(self.bounds.command_timeout, acceptor.accept(plain)).await {
            Ok(Ok(tls)) => {
                *self.stream = Some(BufReader::new(Box::new(tls)));
                self.secure = true;
                Ok(())
            }
            _ => {
                tracing::info!("smtp tls handshake failed");
                Err(End::Closed)
            }
        }
    }
}

/// The final reply to DATA for the gate's outcome: the refusal code, never
/// the content. An admitted message is `250 2.0.0 OK`, with no queue
/// number (the gateway-wide sequence would tell a sender how much mail
/// the gateway takes). With `Discard` (§5.2.1 "Silence") a gate refusal is
/// the same `250` and the message is dropped (counted by code, logged with
/// the code only), so no bounce tells an unknown sender a gateway is
/// there; with `UnknownRecipients::Accept` so is mail for a mailbox with
/// no agent. Temporary failures stay 451.
fn data_reply(
    out: &Result<i64, Delivery>,
    mode: SmtpRefusals,
    unknown: UnknownRecipients,
) -> String {
    let discard = |code: &'static str| {
        metrics::counter!("rdv_gateway_smtp_discarded_total", "refusal" => code).increment(1);
        tracing::info!(refusal = code, "smtp gate refusal discarded");
        ACCEPTED.to_string()
    };
    match out {
        Ok(_) => ACCEPTED.into(),
        Err(Delivery::Refused(r)) => match r {
            Refusal::TooLarge => "552 5.3.4 Message size exceeds fixed maximum message size".into(),
            Refusal::RateLimited(_) => format!("451 4.7.1 Refused: {}, try again later", r.code()),
            Refusal::NotForMailbox if unknown == UnknownRecipients::Accept => discard(r.code()),
            Refusal::NotForMailbox => "550 5.1.1 No such mailbox here".into(),
            _ if mode == SmtpRefusals::Discard => discard(r.code()),
            _ => format!("550 5.7.1 Refused by the RDV gate: {}", r.code()),
        },
        Err(Delivery::Internal(_)) => "451 4.3.0 Temporary failure, try again later".into(),
    }
}

/// The reply to DATA for a message taken (queued, or silently dropped).
const ACCEPTED: &str = "250 2.0.0 OK";

/// A HELO name or reverse-path as recorded: at most 255 bytes of it.
fn clip(s: String) -> String {
    if s.len() <= 255 {
        return s;
    }
    let mut end = 255;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Reads one line (through LF) into `line`, keeping at most `max` bytes; a
/// longer line is consumed and reported, not kept.
async fn read_line<R: AsyncBufRead + Unpin>(
    rd: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    line.clear();
    let mut too_long = false;
    loop {
        let avail = rd.fill_buf().await?;
        if avail.is_empty() {
            return Ok(Line::Eof);
        }
        let (take, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        if !too_long {
            if line.len() + take > max {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(&avail[..take]);
            }
        }
        rd.consume(take);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Ok });
        }
    }
}

/// Reads DATA up to the terminating `<CRLF>.<CRLF>`, dot-unstuffed, into
/// `buf`. `buf` never holds more than `max + 2` bytes (`peak` says how
/// many it did): past `max` the rest is read and discarded. Each chunk must
/// come within `chunk_timeout`.
async fn read_data<R: AsyncBufRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
    peak: &mut usize,
    max: usize,
    chunk_timeout: Duration,
) -> Result<Data, ()> {
    let mut rx = DataReceiver::new();
    // The DATA reply ended a line: prime the receiver so a "." at the very
    // start ends an empty message.
    rx.ingest(&mut b"\r\n".iter(), &mut Vec::new());
    let mut discard: Option<DummyDataReceiver> = None;
    loop {
        let avail = match tokio::time::timeout(chunk_timeout, rd.fill_buf()).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => return Ok(Data::Eof),
            Err(_) => return Err(()),
        };
        if avail.is_empty() {
            return Ok(Data::Eof);
        }
        if let Some(d) = &mut discard {
            let mut it = avail.iter();
            let done = d.ingest(&mut it);
            let used = avail.len() - it.len();
            rd.consume(used);
            if done {
                return Ok(Data::TooLarge);
            }
            continue;
        }
        // Unstuffing never grows the input: feeding at most the room left
        // keeps `buf` within `max + 2` (one byte over, plus the CR of the
        // terminator, which the receiver pops when the LF comes).
        let room = (max + 2).saturating_sub(buf.len()).max(1);
        let slice = &avail[..avail.len().min(room)];
        let mut it = slice.iter();
        let done = rx.ingest(&mut it, buf);
        let used = slice.len() - it.len();
        rd.consume(used);
        *peak = (*peak).max(buf.len());
        let over = if done {
            buf.len() > max
        } else {
            buf.len() > max + 1
        };
        if over {
            *buf = Vec::new();
            if done {
                return Ok(Data::TooLarge);
            }
            discard = Some(DummyDataReceiver::new_data(&rx));
            continue;
        }
        if done {
            return Ok(Data::Complete);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn data(input: &[u8], max: usize, cap: usize) -> (Result<Data, ()>, Vec<u8>, usize) {
        // A small reader buffer exercises the split points; a large one
        // hands over big chunks at once.
        let mut rd = BufReader::with_capacity(cap, input);
        let mut buf = Vec::new();
        let mut peak = 0;
        let r = read_data(&mut rd, &mut buf, &mut peak, max, Duration::from_secs(5)).await;
        (r, buf, peak)
    }

    #[tokio::test]
    async fn data_is_dot_unstuffed_and_ends_at_the_dot() {
        for cap in [1, 7, 4096] {
            let (r, buf, _) = data(
                b"Subject: x\r\n\r\n..leading dot\r\n.\r\nNOOP\r\n",
                1000,
                cap,
            )
            .await;
            assert!(matches!(r, Ok(Data::Complete)));
            assert_eq!(buf, b"Subject: x\r\n\r\n.leading dot\r\n");
            let (r, buf, _) = data(b".\r\n", 1000, cap).await;
            assert!(matches!(r, Ok(Data::Complete)));
            assert!(buf.is_empty());
        }
    }

    #[tokio::test]
    async fn oversize_data_is_discarded_not_kept() {
        let mut big = vec![b'a'; 100_000];
        big.extend_from_slice(b"\r\n.\r\n");
        for cap in [1, 7, 4096, 1 << 20] {
            let (r, buf, peak) = data(&big, 100, cap).await;
            assert!(matches!(r, Ok(Data::TooLarge)));
            assert!(buf.is_empty() && buf.capacity() == 0);
            assert!(peak <= 102, "buffered {peak} bytes past a bound of 100");
            // Exactly at the bound is fine; one over is not.
            for (len, fits) in [(100, true), (101, false)] {
                let mut input = vec![b'a'; len - 2];
                input.extend_from_slice(b"\r\n.\r\n");
                let (r, buf, _) = data(&input, 100, cap).await;
                if fits {
                    assert!(matches!(r, Ok(Data::Complete)), "{len} at {cap}");
                    assert_eq!(buf.len(), len);
                } else {
                    assert!(matches!(r, Ok(Data::TooLarge)), "{len} at {cap}");
                }
            }
        }
    }

    #[tokio::test]
    async fn eof_in_data_is_not_a_message() {
        let (r, _, _) = data(b"Subject: x\r\n\r\nno end", 1000, 7).await;
        assert!(matches!(r, Ok(Data::Eof)));
    }

    #[tokio::test]
    async fn long_lines_are_refused_whole() {
        let mut input = vec![b'x'; 5000];
        input.extend_from_slice(b"\r\nNOOP\r\n");
        let mut rd = BufReader::with_capacity(64, &input[..]);
        let mut line = Vec::new();
        assert!(matches!(
            read_line(&mut rd, &mut line, 100).await.unwrap(),
            Line::TooLong
        ));
        assert!(matches!(
            read_line(&mut rd, &mut line, 100).await.unwrap(),
            Line::Ok
        ));
        assert_eq!(line, b"NOOP\r\n");
        assert!(matches!(
            read_line(&mut rd, &mut line, 100).await.unwrap(),
            Line::Eof
        ));
    }

    #[test]
    fn tls_config_is_checked_at_start() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
        let mut cfg = Config::default();
        assert!(tls_acceptor(&cfg).unwrap().is_none());
        cfg.smtp_tls_cert_file = Some(dir.join("cert.pem"));
        cfg.smtp_tls_key_file = Some(dir.join("key.pem"));
        assert!(tls_acceptor(&cfg).unwrap().is_some());
        // A key that is no key, a missing file: refused, the file named.
        cfg.smtp_tls_key_file = Some(dir.join("README.md"));
        let e = tls_acceptor(&cfg).err().unwrap().to_string();
        assert!(e.contains("smtp_tls_key_file"), "{e}");
        cfg.smtp_tls_cert_file = Some(dir.join("absent.pem"));
        let e = tls_acceptor(&cfg).err().unwrap().to_string();
        assert!(e.contains("smtp_tls_cert_file"), "{e}");
    }

    #[test]
    fn clip_keeps_char_boundaries() {
        let s = "é".repeat(200);
        let c = clip(s);
        assert!(c.len() <= 255 && c.chars().all(|ch| ch == 'é'));
    }
}
