//! Regenerates the unsigned and mail-auth-signed messages of the corpus
//! (`cargo test -p rdv-probe-gateway --test gen_corpus -- --ignored`), then
//! run tests/python/sign_corpus.py for the dkimpy-signed ones. The corpus is
//! checked in; this is how it was made, not part of the suite.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;

use common::*;
use mail_auth::common::crypto::{Ed25519Key, RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::{Canonicalization, DkimSigner};
use rdv_proto::mailblock::{self, TransferEncoding};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;

const TO: &str = "john@doe.test";
const FROM: &str = "Alice's agent <alice@sender.test>";
const TS: &str = "2026-10-08T11:00:00Z";

fn id(n: u8) -> String {
    format!("0b5e7c1a-2d3f-4a5b-8c6d-7e8f9a0b1c{n:02x}")
}

fn write(name: &str, bytes: &[u8]) {
    fs::write(corpus_dir().join(name), bytes).unwrap();
}

fn base(name: &str, bytes: &[u8]) {
    fs::create_dir_all(corpus_dir().join("_base")).unwrap();
    fs::write(corpus_dir().join("_base").join(name), bytes).unwrap();
}

fn replace_header(msg: &[u8], name: &str, value: &str) -> Vec<u8> {
    let s = String::from_utf8(msg.to_vec()).unwrap();
    let mut out = String::new();
    for line in s.split_inclusive("\r\n") {
        if line
            .to_ascii_lowercase()
            .starts_with(&format!("{}:", name.to_ascii_lowercase()))
        {
            out.push_str(&format!("{name}: {value}\r\n"));
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

fn prepend(msg: &[u8], headers: &str) -> Vec<u8> {
    let mut v = headers.as_bytes().to_vec();
    v.extend_from_slice(msg);
    v
}

/// The composed headers with a hand-made quoted-printable body.
fn with_body(msg: &[u8], body: &str) -> Vec<u8> {
    let s = String::from_utf8(msg.to_vec()).unwrap();
    let (head, _) = s.split_once("\r\n\r\n").unwrap();
    format!("{head}\r\n\r\n{}", mailblock::qp_encode(body)).into_bytes()
}

#[test]
#[ignore]
fn generate() {
    let qp = TransferEncoding::QuotedPrintable;
    let b64 = TransferEncoding::Base64;
    // Bases the Python signer signs (dkimpy, an independent implementation).
    base("probe-qp.eml", &probe_mail(&id(1), TO, FROM, TS, qp));
    base("probe-b64.eml", &probe_mail(&id(2), TO, FROM, TS, b64));
    base("probe-forwarded.eml", &probe_mail(&id(3), TO, FROM, TS, qp));
    base("probe-altered.eml", &probe_mail(&id(4), TO, FROM, TS, qp));
    base("probe-mismatch.eml", &probe_mail(&id(5), TO, FROM, TS, qp));
    base("probe-badsig.eml", &probe_mail(&id(6), TO, FROM, TS, qp));

    // Signed by mail-auth.
    let rsa_pem = fs::read_to_string(corpus_dir().join("keys/rsa2048.pem")).unwrap();
    let rsa =
        RsaKey::<Sha256>::from_key_der(PrivateKeyDer::from_pem_slice(rsa_pem.as_bytes()).unwrap())
            .unwrap();
    let m = probe_mail(&id(7), TO, FROM, TS, qp);
    let sig = DkimSigner::from_key(rsa)
        .domain("sender.test")
        .selector("rsa")
        .headers(["From", "To", "Subject", "Date", "Message-ID", "X-Rdv-Probe"])
        .header_canonicalization(Canonicalization::Relaxed)
        .body_canonicalization(Canonicalization::Relaxed)
        .sign(&m)
        .unwrap();
    write("mail-auth-rsa.eml", &prepend(&m, &sig.to_header()));

    let ed_pem = fs::read_to_string(corpus_dir().join("keys/ed25519.pem")).unwrap();
    let der = PrivateKeyDer::from_pem_slice(ed_pem.as_bytes()).unwrap();
    let ed = Ed25519Key::from_pkcs8_maybe_unchecked_der(der.secret_der()).unwrap();
    let m = probe_mail(&id(8), TO, FROM, TS, b64);
    let sig = DkimSigner::from_key(ed)
        .domain("sender.test")
        .selector("ed")
        .headers(["From", "To", "Subject", "Date", "Message-ID"])
        .header_canonicalization(Canonicalization::Simple)
        .body_canonicalization(Canonicalization::Simple)
        .sign(&m)
        .unwrap();
    write("mail-auth-ed25519.eml", &prepend(&m, &sig.to_header()));

    // Trusted mode: the nearest trusted hop's header, and forged ones.
    let m = probe_mail(&id(9), TO, FROM, TS, qp);
    write(
        "trusted-pass.eml",
        &prepend(
            &m,
            "Authentication-Results: mx.trusted.test;\r\n\tdkim=pass header.d=sender.test;\r\n\tspf=pass smtp.mailfrom=sender.test;\r\n\tdmarc=pass (p=reject) header.from=sender.test\r\n",
        ),
    );
    let m = probe_mail(&id(10), TO, FROM, TS, qp);
    write(
        "forged-authentication-results.eml",
        &prepend(
            &m,
            "Authentication-Results: mx.trusted.test; dkim=none; spf=none smtp.mailfrom=sender.test; dmarc=none header.from=sender.test\r\n\
             Authentication-Results: mx.evil.test; dkim=pass header.d=sender.test; dmarc=pass header.from=sender.test\r\n\
             Authentication-Results: mx.trusted.test; dkim=pass header.d=sender.test; dmarc=pass header.from=sender.test\r\n",
        ),
    );

    // Structural refusals.
    let ok = probe_mail(&id(11), TO, FROM, TS, qp);
    write(
        "missing-block.eml",
        &with_body(&ok, "Hello, no machine part here.\r\n"),
    );
    let block =
        mailblock::block_text(&mailblock::probe_payload(&request(&id(11), TO, TS))).unwrap();
    write(
        "duplicated-block.eml",
        &with_body(
            &ok,
            &format!("Two blocks.\r\n\r\n{block}\r\n\r\n{block}\r\n"),
        ),
    );
    let mut req = request(&id(12), TO, TS);
    req["greeting"] = serde_json::json!("Alice's agent requests contact. (edited after signing)");
    write(
        "bad-request-signature.eml",
        &compose(&mailblock::probe_payload(&req), TO, FROM, qp),
    );
    write(
        "expired-probe.eml",
        &probe_mail(&id(13), TO, FROM, "2026-09-20T11:00:00Z", qp),
    );
    write(
        "to-hint-mismatch.eml",
        &probe_mail(&id(14), "someone-else@doe.test", FROM, TS, qp),
    );
    let m = probe_mail(&id(15), TO, FROM, TS, qp);
    write(
        "list-traffic.eml",
        &prepend(
            &m,
            "List-Id: <friends.lists.sender.test>\r\nPrecedence: list\r\n",
        ),
    );
    write(
        "auto-replied.eml",
        &replace_header(&m, "Auto-Submitted", "auto-replied"),
    );
    write(
        "two-recipients.eml",
        &replace_header(&m, "To", "john@doe.test, jane@doe.test"),
    );
    write("cc-recipient.eml", &prepend(&m, "Cc: jane@doe.test\r\n"));
    let no_marker = replace_header(&m, "Subject", "hello there");
    let no_marker = String::from_utf8(no_marker)
        .unwrap()
        .replace("X-Rdv-Probe:", "X-Other:");
    write("no-marker.eml", no_marker.as_bytes());
    write(
        "marker-mismatch.eml",
        &replace_header(&m, "Subject", "[RDV-INVITE] an invitation"),
    );
    write(
        "header-id-mismatch.eml",
        &replace_header(
            &m,
            "X-Rdv-Probe",
            &format!("v=1; id={}; from={}", id(99), requester().id()),
        ),
    );

    // Non-UTF-8: a Latin-1 paragraph (decoded by charset) and a raw 0xFF
    // in an unrelated header: the block is intact, so the probe passes.
    let m = probe_mail(&id(16), TO, FROM, TS, qp);
    let s = String::from_utf8(m).unwrap();
    let (head, body) = s.split_once("\r\n\r\n").unwrap();
    let head = head.replace("charset=utf-8", "charset=iso-8859-1");
    let mut raw = b"X-Junk: ".to_vec();
    raw.extend_from_slice(&[0xff, 0xfe, b'\r', b'\n']);
    raw.extend_from_slice(head.as_bytes());
    raw.extend_from_slice(b"\r\n\r\nCaf=E9 cr=E8me.\r\n\r\n");
    raw.extend_from_slice(body.as_bytes());
    write("non-utf8-latin1.eml", &raw);
    // Raw invalid UTF-8 inside the JSON line of an 8bit utf-8 body.
    let line =
        rdv_proto::canon::to_string(&mailblock::probe_payload(&request(&id(17), TO, TS))).unwrap();
    let line = line.replacen("Alice", "Al\u{1}ce", 1);
    let mut bytes = line.into_bytes();
    let pos = bytes.iter().position(|&b| b == 1).unwrap();
    bytes[pos] = 0xff;
    let m = probe_mail(&id(17), TO, FROM, TS, qp);
    let s = String::from_utf8(m).unwrap();
    let (head, _) = s.split_once("\r\n\r\n").unwrap();
    let head = head.replace(
        "Content-Transfer-Encoding: quoted-printable",
        "Content-Transfer-Encoding: 8bit",
    );
    let mut raw = head.into_bytes();
    raw.extend_from_slice(b"\r\n\r\nIntro.\r\n\r\n---BEGIN RDV/1---\r\n");
    raw.extend_from_slice(&bytes);
    raw.extend_from_slice(b"\r\n---END RDV/1---\r\n");
    write("non-utf8-block.eml", &raw);

    // Malformed MIME: a multipart whose boundary never appears, so its
    // "parts" are one preamble that is not text/plain.
    let m = probe_mail(&id(18), TO, FROM, TS, qp);
    let s = String::from_utf8(m).unwrap();
    let s = s.replace(
        "Content-Type: text/plain; charset=utf-8",
        "Content-Type: multipart/mixed; boundary=\"never-used\"",
    );
    write("malformed-mime.eml", s.as_bytes());
    // Headers only, no body separator, garbage.
    write("garbage.eml", b"\x00\x01\x02 this is not mail\xff\xfe");
}
