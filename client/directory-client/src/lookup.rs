//! The requester's side of publish and lookup, without I/O (§4.5).
//!
//! Lookup: the OPRF input is the ASCII `dtopic` of each address (§4.4); the
//! finalized output `y` gives `lookup_id` and `seal_key`; the server sees
//! only a bucket prefix of `lookup_id`. Every listing under the prefix comes
//! back; the requester keeps those whose `lookup_id` is its own, opens the
//! sealed card, and accepts it only when the listing signature, the card
//! (§4.3), the card's agent and the card's claim of the address all hold.

use rdv_proto::doc::card::Card;
use rdv_proto::time::Instant;
use rdv_proto::{Address, AgentKey};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::listing::Listing;
use crate::seal;

/// What one OPRF output gives a requester.
#[derive(Clone)]
pub struct Derived {
    pub address: Address,
    y: [u8; 32],
    pub lookup_id: String,
}

impl std::fmt::Debug for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the address nor y is ever printed.
        write!(f, "Derived(lookup_id={})", self.lookup_id)
    }
}

impl Derived {
    pub fn new(address: Address, y: [u8; 32]) -> Self {
        Self {
            lookup_id: seal::lookup_id_hex(&y),
            address,
            y,
        }
    }

    /// The OPRF output itself: for tests that check it never leaks.
    #[doc(hidden)]
    pub fn output(&self) -> &[u8; 32] {
        &self.y
    }

    /// The bucket this lookup asks for.
    pub fn bucket(&self, hex_len: usize) -> &str {
        &self.lookup_id[..hex_len.min(self.lookup_id.len())]
    }

    /// A signed listing of `card` for this address under `key_id`.
    pub fn listing(
        &self,
        agent: &AgentKey,
        card: &Value,
        key_id: &str,
        updated: Instant,
        expires: Instant,
        rng: &mut (impl rand_core::RngCore + rand_core::CryptoRng),
    ) -> Result<Value> {
        let sealed = seal::seal(card, &self.y, rng)?;
        Listing::sign(agent, key_id, &self.lookup_id, &sealed, updated, expires)
    }

    /// Checks every entry of the buckets returned and keeps the cards that
    /// are this address's: see the module doc for the rules.
    pub fn find(&self, key_id: &str, entries: &[Value], now: Instant, allow_ws: bool) -> Found {
        let mut found = Found {
            address: self.address.clone(),
            cards: Vec::new(),
            refused: Vec::new(),
        };
        for e in entries {
            // Decoys and other requesters' listings never match lookup_id.
            if e.get("lookup_id").and_then(Value::as_str) != Some(self.lookup_id.as_str()) {
                continue;
            }
            match self.check(key_id, e, now, allow_ws) {
                Ok(c) => found.cards.push(c),
                Err(err) => found.refused.push(err),
            }
        }
        found
    }

    fn check(
        &self,
        key_id: &str,
        entry: &Value,
        now: Instant,
        allow_ws: bool,
    ) -> Result<FoundCard> {
        let listing = Listing::parse_signed(entry)?;
        if listing.key_id != key_id {
            return Err(Error::Listing("listing is under another key".into()));
        }
        if listing.expires <= now {
            return Err(Error::Listing("listing expired".into()));
        }
        let doc = seal::open(&listing.sealed, &self.y)?;
        let card = Card::verify(&doc, now, allow_ws)?;
        if card.id != listing.agent {
            return Err(Error::Listing("card is not the listing agent's".into()));
        }
        if !card.claims(&self.address) {
            return Err(Error::Listing("card does not claim the address".into()));
        }
        Ok(FoundCard { card, listing })
    }
}

/// The verified result of looking up one address.
#[derive(Debug, Clone)]
pub struct Found {
    pub address: Address,
    /// Every verified card claiming the address. Claims are self-asserted
    /// (§4.5): more than one means several agents claim it.
    pub cards: Vec<FoundCard>,
    /// Listings under this `lookup_id` that failed a check, with the reason.
    pub refused: Vec<Error>,
}

#[derive(Debug, Clone)]
pub struct FoundCard {
    pub card: Card,
    pub listing: Listing,
}

/// The OPRF input of an address: its `dtopic`, ASCII (§4.4, §4.5).
pub fn oprf_input(address: &Address) -> Vec<u8> {
    address.dtopic().into_bytes()
}

/// Whether `s` is a valid bucket prefix of `hex_len` lowercase hex digits.
pub fn is_bucket(s: &str, hex_len: usize) -> bool {
    s.len() == hex_len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
