//! rdv patch (PATCHES.md, "Connection gate"): a per-connection hook for
//! the embedding application. Upstream rumqttd checks credentials at
//! CONNECT only; it has no per-peer, per-topic or per-packet hook, so an
//! application cannot hold per-address limits or per-topic ACLs without one.
//!
//! The broker asks the gate once per accepted socket (`accept`, before any
//! byte is read) and then asks the returned [`LinkGate`] about CONNECT and
//! every PUBLISH, SUBSCRIBE and UNSUBSCRIBE that the client sends. The
//! `LinkGate` lives as long as the connection and is dropped when it ends,
//! so it can hold counts that are released then. Local links (the
//! application's own, in-process) are never gated.

use std::net::SocketAddr;
use std::time::Duration;

use crate::protocol::QoS;

/// What the gate says about one PUBLISH or SUBSCRIBE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Pass it to the router.
    Allow,
    /// Not permitted for this client. PUBLISH: v5 QoS 1/2 get a
    /// PUBACK/PUBREC with reason 0x87; otherwise (v4, v5 QoS 0) the
    /// connection is closed, as MQTT 3.1.1 §3.3.5 allows.
    /// SUBSCRIBE: every filter of the packet is refused in the SUBACK
    /// (v4 0x80, v5 0x87).
    NotAuthorized,
    /// A rate limit: the connection is closed (v5: DISCONNECT 0x96 first).
    RateTooHigh,
    /// rdv patch (PATCHES.md, "Slowing a publisher"): not yet. Nothing was
    /// spent; the broker holds this packet and every packet read after it,
    /// stops reading the socket (TCP pushes back on the client, as EMQX
    /// throttles), keeps writing to the client, and asks again about the
    /// same packet after this long. The connection stays open.
    Wait(Duration),
    /// A quota. PUBLISH: the connection is closed (v5: DISCONNECT 0x97
    /// first). SUBSCRIBE: every filter of the packet is refused in the
    /// SUBACK (v4 0x80, v5 0x97).
    QuotaExceeded,
}

/// Decides, per accepted socket, whether the broker serves it.
pub trait ConnectionGate: Send + Sync + 'static {
    /// Called in the accept loop before any byte is read (before the TLS or
    /// WebSocket handshake). `None` closes the socket at once.
    fn accept(&self, peer: SocketAddr) -> Option<Box<dyn LinkGate>>;
}

/// One connection's gate. Dropped when the connection ends.
pub trait LinkGate: Send + 'static {
    /// CONNECT: the client id, and the login if the packet has one.
    /// `false` closes the connection without a CONNACK (as upstream does on
    /// a failed login). Called after upstream's static and external auth
    /// (when those are set, both must admit the client).
    fn connect(&mut self, client_id: &str, login: Option<(&str, &str)>) -> bool;

    /// One PUBLISH (or, at CONNECT, the will message the client registers:
    /// the router publishes it later without asking again). `topic` is the
    /// full topic name (v5 topic aliases resolved). For the will, `Wait`
    /// counts as `Allow`: it is not published now.
    fn publish(&mut self, topic: &[u8], payload_len: usize, qos: QoS) -> Verdict;

    /// The filters of one SUBSCRIBE packet, all or none: on anything but
    /// `Allow` the packet does not reach the router (on `Wait`, not yet).
    fn subscribe(&mut self, filters: &[&str]) -> Verdict;

    /// The filters of one UNSUBSCRIBE packet (always passed on).
    fn unsubscribe(&mut self, filters: &[&str]);
}
