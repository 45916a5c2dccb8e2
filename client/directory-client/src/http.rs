//! The typed blocking HTTP client (§4.5): keys, evaluate with proof checks,
//! publish, remove, lookup. Every answer is bounded before it is parsed and
//! every evaluation is checked against a key the directory lists, so a
//! server cannot tag one user with a key of its own.

use std::io::Read;
use std::time::Duration;

use rand_core::{CryptoRng, RngCore};
use rdv_proto::consts::{DIR_OPRF_MODE, DIR_OPRF_SUITE};
use rdv_proto::encoding::{base64, base64_decode};
use rdv_proto::time::{Instant, parse_time};
use rdv_proto::{Address, AgentKey};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::listing::Removal;
use crate::lookup::{Derived, Found, oprf_input};
use crate::oprf::{self, PublicKey};
use crate::wire::{
    ErrorBody, EvaluateRequest, EvaluateResponse, InfoResponse, KeysResponse, ListingResponse,
    LookupRequest, LookupResponse,
};

/// Largest response body read (a lookup of many padded buckets).
pub const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// A key the directory lists, decoded and its id checked.
#[derive(Debug, Clone)]
pub struct ListedKey {
    pub id: String,
    pub public: PublicKey,
    pub not_before: Instant,
    pub not_after: Option<Instant>,
}

/// A directory at one base URL.
#[derive(Debug, Clone)]
pub struct DirectoryClient {
    base: String,
    agent: ureq::Agent,
}

impl DirectoryClient {
    /// `base` is the directory's URL, e.g. `https://dir.example` (no `/v1`).
    pub fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(30))
                .build(),
        }
    }

    /// `GET /v1/info`.
    pub fn info(&self) -> Result<InfoResponse> {
        self.call::<(), _>("GET", "/v1/info", None)
    }

    /// `GET /v1/keys`, each key decoded and its id recomputed.
    pub fn keys(&self) -> Result<Vec<ListedKey>> {
        let r: KeysResponse = self.call::<(), _>("GET", "/v1/keys", None)?;
        parse_keys(&r)
    }

    /// Evaluates `inputs` under `key` in one batch and verifies the proof.
    pub fn evaluate(
        &self,
        key: &ListedKey,
        inputs: &[Vec<u8>],
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<Vec<[u8; 32]>> {
        let blinded = inputs
            .iter()
            .map(|i| oprf::blind(i, rng))
            .collect::<Result<Vec<_>>>()?;
        let req = EvaluateRequest {
            key_id: key.id.clone(),
            blinded: blinded.iter().map(|b| base64(&b.element)).collect(),
        };
        let r: EvaluateResponse = self.call("POST", "/v1/evaluate", Some(&req))?;
        oprf::finalize_answer(&blinded, &key.id, &key.public, &r)
    }

    /// The OPRF-derived values of `addresses` under `key`, in batches.
    pub fn derive(
        &self,
        key: &ListedKey,
        addresses: &[Address],
        max_batch: usize,
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<Vec<Derived>> {
        let mut out = Vec::with_capacity(addresses.len());
        for chunk in addresses.chunks(max_batch.max(1)) {
            let inputs: Vec<Vec<u8>> = chunk.iter().map(oprf_input).collect();
            let ys = self.evaluate(key, &inputs, rng)?;
            out.extend(
                chunk
                    .iter()
                    .cloned()
                    .zip(ys)
                    .map(|(a, y)| Derived::new(a, y)),
            );
        }
        Ok(out)
    }

    /// Publishes `card` (signed by `agent`) under `address` with the newest
    /// active key, expiring `lifetime` after `now`.
    pub fn publish(
        &self,
        agent: &AgentKey,
        card: &Value,
        address: &Address,
        now: Instant,
        lifetime: time::Duration,
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<ListingResponse> {
        let key = newest_key(&self.keys()?, now)?;
        let d = self
            .derive(&key, std::slice::from_ref(address), 1, rng)?
            .remove(0);
        let doc = d.listing(agent, card, &key.id, now, now + lifetime, rng)?;
        self.call("PUT", &format!("/v1/listings/{}", d.lookup_id), Some(&doc))
    }

    /// Removes `agent`'s listing of `address` under every listed key
    /// (a listing made before a rotation lives under the old key).
    pub fn remove(
        &self,
        agent: &AgentKey,
        address: &Address,
        now: Instant,
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<Vec<ListingResponse>> {
        let mut out = Vec::new();
        for key in usable_keys(&self.keys()?, now) {
            let d = self
                .derive(&key, std::slice::from_ref(address), 1, rng)?
                .remove(0);
            let doc = Removal::sign(agent, &key.id, &d.lookup_id, now)?;
            out.push(self.call(
                "DELETE",
                &format!("/v1/listings/{}", d.lookup_id),
                Some(&doc),
            )?);
        }
        Ok(out)
    }

    /// Looks `addresses` up under every usable key and returns, per address,
    /// the verified cards that claim it (see [`Derived::find`]).
    pub fn lookup(
        &self,
        addresses: &[Address],
        now: Instant,
        allow_ws: bool,
        rng: &mut (impl RngCore + CryptoRng),
    ) -> Result<Vec<Found>> {
        let info = self.info()?;
        let hex_len = info.bucket_hex_len as usize;
        let mut found: Vec<Found> = addresses
            .iter()
            .map(|a| Found {
                address: a.clone(),
                cards: Vec::new(),
                refused: Vec::new(),
            })
            .collect();
        for key in usable_keys(&self.keys()?, now) {
            let derived = self.derive(&key, addresses, info.max_batch as usize, rng)?;
            let mut prefixes: Vec<String> = derived
                .iter()
                .map(|d| d.bucket(hex_len).to_string())
                .collect();
            prefixes.sort();
            prefixes.dedup();
            let mut entries: Vec<Value> = Vec::new();
            for chunk in prefixes.chunks((info.max_buckets as usize).max(1)) {
                let req = LookupRequest {
                    key_id: key.id.clone(),
                    buckets: chunk.to_vec(),
                };
                let r: LookupResponse = self.call("POST", "/v1/lookup", Some(&req))?;
                entries.extend(r.buckets.into_iter().flat_map(|b| b.listings));
            }
            for (f, d) in found.iter_mut().zip(&derived) {
                let got = d.find(&key.id, &entries, now, allow_ws);
                f.cards.extend(got.cards);
                f.refused.extend(got.refused);
            }
        }
        Ok(found)
    }

    fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Result<R> {
        let req = self.agent.request(method, &format!("{}{path}", self.base));
        let res = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        match res {
            Ok(r) => read_json(r),
            Err(ureq::Error::Status(status, r)) => {
                let retry_after = r.header("retry-after").and_then(|v| v.parse().ok());
                let body: ErrorBody = read_json(r).unwrap_or(ErrorBody {
                    error: "unknown".into(),
                    message: String::new(),
                });
                Err(Error::Refused {
                    status,
                    code: body.error,
                    message: body.message,
                    retry_after,
                })
            }
            Err(e) => Err(Error::Transport(e.to_string())),
        }
    }
}

fn read_json<R: DeserializeOwned>(r: ureq::Response) -> Result<R> {
    let mut buf = Vec::new();
    r.into_reader()
        .take(MAX_RESPONSE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::Transport(e.to_string()))?;
    if buf.len() as u64 > MAX_RESPONSE_BYTES {
        return Err(Error::Transport("response too large".into()));
    }
    serde_json::from_slice(&buf).map_err(|e| Error::Transport(format!("bad response: {e}")))
}

/// Decodes a key list, refusing a wrong suite or a key whose id is not its hash.
pub fn parse_keys(r: &KeysResponse) -> Result<Vec<ListedKey>> {
    if r.suite != DIR_OPRF_SUITE || r.mode != DIR_OPRF_MODE {
        return Err(Error::Encoding("suite"));
    }
    r.keys
        .iter()
        .map(|k| {
            let bytes = base64_decode(&k.public_key).map_err(|_| Error::Encoding("public key"))?;
            let public = PublicKey::from_bytes(&bytes)?;
            if public.id() != k.id {
                return Err(Error::UnknownKey(k.id.clone()));
            }
            Ok(ListedKey {
                id: k.id.clone(),
                public,
                not_before: parse_time("not_before", &k.not_before)?,
                not_after: k
                    .not_after
                    .as_deref()
                    .map(|s| parse_time("not_after", s))
                    .transpose()?,
            })
        })
        .collect()
}

/// Keys valid at `now`.
pub fn usable_keys(keys: &[ListedKey], now: Instant) -> Vec<ListedKey> {
    keys.iter()
        .filter(|k| k.not_before <= now && k.not_after.is_none_or(|t| now < t))
        .cloned()
        .collect()
}

/// The key to publish under: the usable key with the latest `not_before`.
pub fn newest_key(keys: &[ListedKey], now: Instant) -> Result<ListedKey> {
    usable_keys(keys, now)
        .into_iter()
        .max_by_key(|k| k.not_before)
        .ok_or_else(|| Error::UnknownKey("no usable key".into()))
}
