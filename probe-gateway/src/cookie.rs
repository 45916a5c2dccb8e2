//! Stateless probe cookies (§5.2.1 "Verification", §5.4):
//! `cookie = HMAC-SHA256(K_agent, request_id ‖ canon(from) ‖ date)`,
//! truncated to 128 bits and base32 (26 characters).
//!
//! `K_agent = HKDF-SHA256(ikm = master, info = "rdv1/gw/cookie-key:" ‖ agent
//! ID)`, so nothing per probe is stored. `date` is the UTC day of the
//! probe's `ts`, so a cookie dies with its probe (14 days). A rotated
//! master secret stays valid for one probe lifetime after the rotation.

use hmac::{Hmac, Mac};
use rdv_proto::consts::PROBE_LIFETIME_SECS;
use rdv_proto::time::Instant;
use rdv_proto::{Address, AgentId};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::error::Error;

/// HKDF info prefix of K_agent.
const K_AGENT_INFO: &[u8] = rdv_proto::consts::GW_COOKIE_KEY_INFO;
/// Truncated MAC length, bytes.
const COOKIE_MAC_LEN: usize = 16;
/// Seconds in a date bucket.
const DAY: i64 = 24 * 3600;

/// A master secret: 32 bytes or more, read from a file, never logged.
#[derive(Clone)]
pub struct MasterSecret(Vec<u8>);

impl std::fmt::Debug for MasterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterSecret(..)")
    }
}

impl MasterSecret {
    pub fn new(bytes: Vec<u8>) -> Result<Self, Error> {
        if bytes.len() < 32 {
            return Err(Error::Config(
                "master secret must be at least 32 bytes".into(),
            ));
        }
        Ok(Self(bytes))
    }

    /// A secret file holds 64 or more hex digits (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<Self, Error> {
        let bytes = hex::decode(text.trim())
            .map_err(|_| Error::Config("master secret file is not hex".into()))?;
        Self::new(bytes)
    }

    fn agent_key(&self, agent: &AgentId) -> [u8; 32] {
        let mut info = K_AGENT_INFO.to_vec();
        info.extend_from_slice(agent.as_str().as_bytes());
        self.derive(&info)
    }

    /// A 32-byte key for one purpose, domain-separated by `info`.
    fn derive(&self, info: &[u8]) -> [u8; 32] {
        let hk = hkdf::Hkdf::<Sha256>::new(None, &self.0);
        let mut k = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's 8160-byte limit.
        if hk.expand(info, &mut k).is_err() {
            k = [0u8; 32];
        }
        k
    }
}

/// The current master secret and, after a rotation, the previous one.
#[derive(Debug, Clone)]
pub struct CookieKeys {
    pub current: MasterSecret,
    /// The previous secret and when it was retired.
    pub previous: Option<(MasterSecret, Instant)>,
}

impl CookieKeys {
    /// The cookie the agent `agent` sends in the SYN-ACK to `from` for the
    /// probe `request_id` signed at `probe_ts`.
    pub fn issue(
        &self,
        agent: &AgentId,
        request_id: &str,
        from: &Address,
        probe_ts: Instant,
    ) -> String {
        encode(&mac(&self.current, agent, request_id, from, day(probe_ts)))
    }

    /// Whether `cookie` is one we issued for this probe and sender and its
    /// probe has not expired at `now`. Constant time in the cookie's value;
    /// every candidate day and key is tried so timing says nothing of which.
    pub fn verify(
        &self,
        agent: &AgentId,
        request_id: &str,
        from: &Address,
        cookie: &str,
        now: Instant,
    ) -> bool {
        let Some(given) = decode(cookie) else {
            return false;
        };
        let mut keys: Vec<&MasterSecret> = vec![&self.current];
        if let Some((prev, retired)) = &self.previous
            && (now - *retired).whole_seconds() < PROBE_LIFETIME_SECS
        {
            keys.push(prev);
        }
        // A probe signed on day d lives until d + 14 days: the days a live
        // cookie can carry are today and the 13 before it (so a cookie lives
        // between 13 and 14 days, never longer than its probe).
        let today = day(now);
        let days = PROBE_LIFETIME_SECS / DAY;
        let mut ok = subtle::Choice::from(0u8);
        for k in keys {
            for d in (today - days + 1)..=today {
                let m = mac(k, agent, request_id, from, d);
                ok |= m[..].ct_eq(&given[..]);
            }
        }
        ok.into()
    }
}

fn day(t: Instant) -> i64 {
    t.unix_timestamp().div_euclid(DAY)
}

fn mac(
    k: &MasterSecret,
    agent: &AgentId,
    request_id: &str,
    from: &Address,
    day: i64,
) -> [u8; COOKIE_MAC_LEN] {
    let key = k.agent_key(agent);
    let mut m = match <Hmac<Sha256> as Mac>::new_from_slice(&key) {
        Ok(m) => m,
        Err(_) => return [0u8; COOKIE_MAC_LEN],
    };
    // Length-prefixed fields, so no two inputs share an encoding.
    for field in [request_id.as_bytes(), from.canon().as_bytes()] {
        m.update(&(field.len() as u64).to_be_bytes());
        m.update(field);
    }
    m.update(&day.to_be_bytes());
    let full = m.finalize().into_bytes();
    let mut out = [0u8; COOKIE_MAC_LEN];
    out.copy_from_slice(&full[..COOKIE_MAC_LEN]);
    out
}

fn encode(b: &[u8]) -> String {
    data_encoding::BASE32_NOPAD.encode(b).to_ascii_lowercase()
}

fn decode(s: &str) -> Option<[u8; COOKIE_MAC_LEN]> {
    if s.len() != 26 {
        return None;
    }
    let v = data_encoding::BASE32_NOPAD
        .decode(s.to_ascii_uppercase().as_bytes())
        .ok()?;
    v.try_into().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rdv_proto::AgentKey;
    use time::Duration;
    use time::macros::datetime;

    fn secret(b: u8) -> MasterSecret {
        MasterSecret::new(vec![b; 32]).unwrap()
    }

    fn agent(n: u8) -> AgentId {
        AgentKey::from_seed([n; 32]).id().clone()
    }

    const REQ: &str = "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

    #[test]
    fn round_trip_and_binding() {
        let keys = CookieKeys {
            current: secret(1),
            previous: None,
        };
        let from = Address::parse("Alice@Example.org").unwrap();
        let ts = datetime!(2026-10-08 11:00 UTC);
        let c = keys.issue(&agent(1), REQ, &from, ts);
        assert_eq!(c.len(), 26);
        assert!(
            c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
        assert!(keys.verify(&agent(1), REQ, &from, &c, ts));
        // canon(from): case does not matter.
        let same = Address::parse("alice@example.org").unwrap();
        assert!(keys.verify(&agent(1), REQ, &same, &c.to_ascii_uppercase(), ts));
        // Wrong agent, request, sender or cookie.
        assert!(!keys.verify(&agent(2), REQ, &from, &c, ts));
        let other_req = "7f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
        assert!(!keys.verify(&agent(1), other_req, &from, &c, ts));
        let bob = Address::parse("bob@example.org").unwrap();
        assert!(!keys.verify(&agent(1), REQ, &bob, &c, ts));
        let mut wrong = c.clone().into_bytes();
        wrong[0] = if wrong[0] == b'a' { b'b' } else { b'a' };
        assert!(!keys.verify(
            &agent(1),
            REQ,
            &from,
            &String::from_utf8(wrong).unwrap(),
            ts
        ));
        assert!(!keys.verify(&agent(1), REQ, &from, "", ts));
        assert!(!keys.verify(&agent(1), REQ, &from, &c[..25], ts));
        // Another master secret issues other cookies.
        let other = CookieKeys {
            current: secret(2),
            previous: None,
        };
        assert!(!other.verify(&agent(1), REQ, &from, &c, ts));
    }

    #[test]
    fn dies_with_the_probe() {
        let keys = CookieKeys {
            current: secret(1),
            previous: None,
        };
        let from = Address::parse("alice@example.org").unwrap();
        let ts = datetime!(2026-10-08 11:00 UTC);
        let c = keys.issue(&agent(1), REQ, &from, ts);
        assert!(keys.verify(&agent(1), REQ, &from, &c, ts + Duration::days(13)));
        assert!(!keys.verify(&agent(1), REQ, &from, &c, ts + Duration::days(14)));
        // Never valid before the probe's day either.
        assert!(!keys.verify(&agent(1), REQ, &from, &c, ts - Duration::days(1)));
    }

    #[test]
    fn rotation_keeps_previous_for_one_lifetime() {
        let from = Address::parse("alice@example.org").unwrap();
        let ts = datetime!(2026-10-08 11:00 UTC);
        let old = CookieKeys {
            current: secret(1),
            previous: None,
        };
        let c = old.issue(&agent(1), REQ, &from, ts);
        let rotated_at = ts + Duration::hours(1);
        let new = CookieKeys {
            current: secret(2),
            previous: Some((secret(1), rotated_at)),
        };
        assert!(new.verify(&agent(1), REQ, &from, &c, ts + Duration::days(2)));
        // New cookies come from the new secret.
        let c2 = new.issue(&agent(1), REQ, &from, ts);
        assert_ne!(c, c2);
        assert!(!old.verify(&agent(1), REQ, &from, &c2, ts));
        // Once the previous secret is a lifetime old it is gone.
        let gone = CookieKeys {
            current: secret(2),
            previous: Some((secret(1), ts - Duration::days(14))),
        };
        assert!(!gone.verify(&agent(1), REQ, &from, &c, ts + Duration::days(1)));
    }

    #[test]
    fn secrets_are_bounded_and_hidden() {
        assert!(MasterSecret::new(vec![0; 31]).is_err());
        assert!(MasterSecret::from_hex("zz").is_err());
        let s = MasterSecret::from_hex(&"ab".repeat(32)).unwrap();
        assert_eq!(format!("{s:?}"), "MasterSecret(..)");
    }
}
