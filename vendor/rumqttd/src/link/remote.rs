use crate::gate::{LinkGate, Verdict};
use crate::link::local::{LinkError, LinkRx, LinkTx};
use crate::link::network;
use crate::link::network::Network;
use crate::local::LinkBuilder;
use crate::protocol::{
    ConnAck, Connect, ConnectReturnCode, Disconnect, DisconnectProperties, DisconnectReasonCode,
    Login, Packet, Protocol, PubAck, PubAckReason, PubRec, PubRecReason, QoS, SubAck,
    SubscribeReasonCode,
};
use crate::router::{Event, Notification};
use crate::{ConnectionId, ConnectionSettings};

use bytes::Bytes;
use flume::{RecvError, SendError, Sender, TrySendError};
use std::cmp::min;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::time::error::Elapsed;
use tokio::time::Instant;
use tokio::{select, time};
use tracing::{trace, Span};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O")]
    Io(#[from] io::Error),
    #[error("Zero keep alive")]
    ZeroKeepAlive,
    #[error("Not connect packet")]
    NotConnectPacket(Packet),
    #[error("Network {0}")]
    Network(#[from] network::Error),
    #[error("Timeout")]
    Timeout(#[from] Elapsed),
    #[error("Channel send error")]
    Send(#[from] SendError<(ConnectionId, Event)>),
    #[error("Channel recv error")]
    Recv(#[from] RecvError),
    #[error("Got new session, disconnecting old one")]
    SessionEnd,
    #[error("Persistent session requires valid client id")]
    InvalidClientId,
    #[error("Unexpected router message")]
    NotConnectionAck,
    #[error("ConnAck error {0}")]
    ConnectionAck(String),
    #[error("Authentication error")]
    InvalidAuth,
    #[error("Channel try send error")]
    TrySend(#[from] TrySendError<(ConnectionId, Event)>),
    #[error("Link error = {0}")]
    Link(#[from] LinkError),
    /// rdv patch (PATCHES.md, "Connection gate").
    #[error("Closed by the connection gate: {0:?}")]
    Gate(Verdict),
}

/// Orchestrates between Router and Network.
pub struct RemoteLink<P> {
    connect: Connect,
    pub(crate) connection_id: ConnectionId,
    network: Network<P>,
    link_tx: LinkTx,
    link_rx: LinkRx,
    notifications: VecDeque<Notification>,
    pub(crate) will_delay_interval: u32,
    /// rdv patch (PATCHES.md, "Connection gate"): the connection's gate,
    /// and the v5 topic aliases it let through (alias → topic), to name the
    /// topic of a PUBLISH that carries only an alias.
    gate: Option<Box<dyn LinkGate>>,
    aliases: HashMap<u16, Bytes>,
    /// rdv patch (PATCHES.md, "Slowing a publisher"): packets read but not
    /// yet let through, the first of them told `Verdict::Wait`; while any
    /// are held the socket is not read. `resume` is when the gate is asked
    /// again.
    held: VecDeque<Packet>,
    resume: Instant,
}

impl<P: Protocol> RemoteLink<P> {
    pub async fn new(
        router_tx: Sender<(ConnectionId, Event)>,
        tenant_id: Option<String>,
        mut network: Network<P>,
        connect_packet: Packet,
        dynamic_filters: bool,
        assigned_client_id: Option<String>,
        gate: Option<Box<dyn LinkGate>>,
    ) -> Result<RemoteLink<P>, Error> {
        let Packet::Connect(connect, props, lastwill, lastwill_props, _) = connect_packet else {
            return Err(Error::NotConnectPacket(connect_packet));
        };

        // Register this connection with the router. Router replys with ack which if ok will
        // start the link. Router can sometimes reject the connection (ex max connection limit)
        let client_id = assigned_client_id.as_ref().unwrap_or(&connect.client_id);
        let clean_session = connect.clean_session;

        let topic_alias_max = props.as_ref().and_then(|p| p.topic_alias_max);
        let session_expiry = props
            .as_ref()
            .and_then(|p| p.session_expiry_interval)
            .unwrap_or(0);

        let delay_interval = lastwill_props
            .as_ref()
            .and_then(|f| f.delay_interval)
            .unwrap_or(0);

        // The Server delays publishing the Client’s Will Message until
        // the Will Delay Interval has passed or the Session ends, whichever happens first
        let will_delay_interval = min(session_expiry, delay_interval);

        let (link_tx, link_rx, notification) = LinkBuilder::new(client_id, router_tx)
            .tenant_id(tenant_id)
            .clean_session(clean_session)
            .last_will(lastwill)
            .last_will_properties(lastwill_props)
            .dynamic_filters(dynamic_filters)
            .topic_alias_max(topic_alias_max.unwrap_or(0))
            .build()?;

        let id = link_rx.id();
        Span::current().record("connection_id", id);

        if let Some(mut packet) = notification.into() {
            if let Packet::ConnAck(_ack, props) = &mut packet {
                let mut new_props = props.clone().unwrap_or_default();
                new_props.assigned_client_identifier = assigned_client_id;
                *props = Some(new_props);
                network.write(packet).await?;
            }
        }

        Ok(RemoteLink {
            connect,
            connection_id: id,
            network,
            link_tx,
            link_rx,
            notifications: VecDeque::with_capacity(100),
            will_delay_interval,
            gate,
            aliases: HashMap::new(),
            held: VecDeque::new(),
            resume: Instant::now(),
        })
    }

    pub async fn start(&mut self) -> Result<(), Error> {
        self.network.set_keepalive(self.connect.keep_alive);

        // Note:
        // Shouldn't result in bounded queue deadlocks because of blocking n/w send
        loop {
            select! {
                // rdv patch (PATCHES.md, "Slowing a publisher"): the socket
                // is not read while the gate holds packets.
                o = self.network.read(), if self.held.is_empty() => {
                    let packet = o?;
                    let mut replies = VecDeque::new();
                    let mut gated = Gated::Pass;
                    let (start, len) = {
                        let mut buffer = self.link_tx.buffer();
                        let start = buffer.len();
                        match self.gate.as_deref_mut() {
                            None => {
                                buffer.push_back(packet);
                                self.network.readv(&mut buffer)?;
                            }
                            // rdv patch (PATCHES.md, "Connection gate"):
                            // only what the gate allows reaches the router.
                            Some(gate) => {
                                self.held.push_back(packet);
                                self.network.readv(&mut self.held)?;
                                gated = gate_packets(
                                    gate,
                                    self.network.is_v5(),
                                    &mut self.aliases,
                                    &mut self.held,
                                    &mut buffer,
                                    &mut replies,
                                );
                            }
                        }
                        (start, buffer.len())
                    };

                    trace!("Packets read from network, count = {}", len);
                    self.after_gate(len > start, replies, gated).await?;
                }
                // rdv patch (PATCHES.md, "Slowing a publisher"): the held
                // packets are offered to the gate again.
                _ = time::sleep_until(self.resume), if !self.held.is_empty() => {
                    let mut replies = VecDeque::new();
                    let mut gated = Gated::Pass;
                    let passed = {
                        let mut buffer = self.link_tx.buffer();
                        let start = buffer.len();
                        if let Some(gate) = self.gate.as_deref_mut() {
                            gated = gate_packets(
                                gate,
                                self.network.is_v5(),
                                &mut self.aliases,
                                &mut self.held,
                                &mut buffer,
                                &mut replies,
                            );
                        } else {
                            buffer.extend(self.held.drain(..));
                        }
                        buffer.len() > start
                    };
                    self.after_gate(passed, replies, gated).await?;
                }
                // Receive from router when previous when state isn't in collision
                // due to previously received data request
                o = self.link_rx.exchange(&mut self.notifications) => {
                    o?;
                    let mut packets = VecDeque::new();
                    let mut unscheduled = false;

                    for notif in self.notifications.drain(..) {
                        if let Some(packet) = notif.into() {
                            packets.push_back(packet);
                        } else {
                            unscheduled = true;
                        }

                    }
                    self.network.writev(packets).await?;
                    if unscheduled {
                        self.link_rx.wake().await?;
                    }
                }
            }
        }
    }

    /// rdv patch (PATCHES.md, "Connection gate", "Slowing a publisher"):
    /// tells the router about what passed, writes the refusals'
    /// acknowledgements, then closes or sets when to ask again.
    async fn after_gate(
        &mut self,
        passed: bool,
        replies: VecDeque<Packet>,
        gated: Gated,
    ) -> Result<(), Error> {
        if passed {
            self.link_tx.notify().await?;
        }
        if !replies.is_empty() {
            self.network.writev(replies).await?;
        }
        match gated {
            Gated::Pass => Ok(()),
            Gated::Wait(d) => {
                self.resume = Instant::now() + d;
                Ok(())
            }
            Gated::Close(v) => Err(Error::Gate(v)),
        }
    }
}

/// rdv patch: what `gate_packets` decided for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gated {
    /// Everything held has been passed on or refused.
    Pass,
    /// The first held packet waits this long (PATCHES.md, "Slowing a
    /// publisher").
    Wait(Duration),
    /// The connection closes (after the replies).
    Close(Verdict),
}

/// Read MQTT connect packet from network and verify it.
/// authentication and checks are done here.
pub async fn mqtt_connect<P>(
    config: Arc<ConnectionSettings>,
    network: &mut Network<P>,
    gate: Option<&mut dyn LinkGate>,
) -> Result<Packet, Error>
where
    P: Protocol,
{
    // Wait for MQTT connect packet and error out if it's not received in time to prevent
    // DOS attacks by filling total connections that the server can handle with idle open
    // connections which results in server rejecting new connections
    let connection_timeout_ms = config.connection_timeout_ms.into();
    let mut packet = time::timeout(Duration::from_millis(connection_timeout_ms), async {
        let packet = network.read().await?;
        Ok::<_, network::Error>(packet)
    })
    .await??;

    let (connect, _props, will, login) = match packet {
        Packet::Connect(ref connect, ref props, ref will, _, ref login) => {
            (connect, props, will, login)
        }
        packet => return Err(Error::NotConnectPacket(packet)),
    };

    Span::current().record("client_id", &connect.client_id);

    handle_auth(config.clone(), login.as_ref(), &connect.client_id).await?;

    // rdv patch (PATCHES.md, "Connection gate"): the gate admits the login
    // and the will message (published later by the router unasked).
    let gated = gate.is_some();
    if let Some(gate) = gate {
        let l = login
            .as_ref()
            .map(|l| (l.username.as_str(), l.password.as_str()));
        if !gate.connect(&connect.client_id, l) {
            return Err(Error::InvalidAuth);
        }
        if let Some(w) = will {
            // rdv patch (PATCHES.md, "Slowing a publisher"): a will is not
            // published now, so a rate's `Wait` does not refuse it.
            match gate.publish(&w.topic, w.message.len(), w.qos) {
                Verdict::Allow | Verdict::Wait(_) => {}
                _ => return Err(Error::InvalidAuth),
            }
        }
    }

    // When keep_alive feature is disabled client can live forever, which is not good in
    // distributed broker context so currenlty we don't allow it.
    if connect.keep_alive == 0 {
        return Err(Error::ZeroKeepAlive);
    }

    let empty_client_id = connect.client_id.is_empty();
    let clean_session = connect.clean_session;

    if empty_client_id && !clean_session {
        let ack = ConnAck {
            session_present: false,
            code: ConnectReturnCode::ClientIdentifierNotValid,
        };

        let packet = Packet::ConnAck(ack, None);
        network.write(packet).await?;

        return Err(Error::InvalidClientId);
    }

    // rdv patch (PATCHES.md, "Connection gate"): gated sessions are clean.
    // A persistent session would keep its subscriptions after the gate that
    // admitted them is gone, for whoever connects next with that client id.
    if gated {
        if let Packet::Connect(connect, ..) = &mut packet {
            connect.clean_session = true;
        }
    }

    // Ok((connect, props, lastwill, lastwill_props))
    Ok(packet)
}

/// rdv patch (PATCHES.md, "Connection gate"): asks the gate about the
/// packets in `held` (read from the network, in order), moves those it
/// allows to `buffer` (for the router), and queues the refusals'
/// acknowledgements in `replies`. Returns `Close` when the connection must
/// close (after `replies`, which then end with a v5 DISCONNECT); packets
/// after that one are dropped. Returns `Wait` (PATCHES.md, "Slowing a
/// publisher") when the gate holds the first packet left in `held`: it and
/// those after it stay there, in order, for the next call.
///
/// Refusal acknowledgements are written at once, so they may overtake the
/// router's acknowledgements of earlier packets of the same batch.
fn gate_packets(
    gate: &mut dyn LinkGate,
    v5: bool,
    aliases: &mut HashMap<u16, Bytes>,
    held: &mut VecDeque<Packet>,
    buffer: &mut VecDeque<Packet>,
    replies: &mut VecDeque<Packet>,
) -> Gated {
    while let Some(packet) = held.pop_front() {
        match packet {
            Packet::Publish(publish, props) => {
                let alias = props.as_ref().and_then(|p| p.topic_alias);
                // An empty topic with an alias names the alias's topic; an
                // unknown alias is left to the router (it disconnects).
                let topic = match alias {
                    Some(a) if publish.topic.is_empty() => {
                        aliases.get(&a).cloned().unwrap_or_default()
                    }
                    _ => publish.topic.clone(),
                };
                let verdict = if topic.is_empty() && alias.is_some() {
                    Verdict::Allow
                } else {
                    gate.publish(&topic, publish.payload.len(), publish.qos)
                };
                match verdict {
                    Verdict::Wait(d) => {
                        held.push_front(Packet::Publish(publish, props));
                        return Gated::Wait(d);
                    }
                    Verdict::Allow => {
                        if let Some(a) = alias.filter(|_| !publish.topic.is_empty()) {
                            aliases.insert(a, publish.topic.clone());
                        }
                        buffer.push_back(Packet::Publish(publish, props));
                    }
                    Verdict::NotAuthorized if v5 && publish.qos == QoS::AtLeastOnce => {
                        let reason = PubAckReason::NotAuthorized;
                        let ack = PubAck {
                            pkid: publish.pkid,
                            reason,
                        };
                        replies.push_back(Packet::PubAck(ack, None));
                    }
                    Verdict::NotAuthorized if v5 && publish.qos == QoS::ExactlyOnce => {
                        let reason = PubRecReason::NotAuthorized;
                        let rec = PubRec {
                            pkid: publish.pkid,
                            reason,
                        };
                        replies.push_back(Packet::PubRec(rec, None));
                    }
                    v => {
                        held.clear();
                        return Gated::Close(gate_close(v, v5, replies));
                    }
                }
            }
            Packet::Subscribe(subscribe, props) => {
                let filters: Vec<&str> =
                    subscribe.filters.iter().map(|f| f.path.as_str()).collect();
                let code = match gate.subscribe(&filters) {
                    Verdict::Allow => {
                        buffer.push_back(Packet::Subscribe(subscribe, props));
                        continue;
                    }
                    Verdict::Wait(d) => {
                        held.push_front(Packet::Subscribe(subscribe, props));
                        return Gated::Wait(d);
                    }
                    Verdict::RateTooHigh => {
                        held.clear();
                        return Gated::Close(gate_close(Verdict::RateTooHigh, v5, replies));
                    }
                    _ if !v5 => SubscribeReasonCode::Failure,
                    Verdict::QuotaExceeded => SubscribeReasonCode::QuotaExceeded,
                    _ => SubscribeReasonCode::NotAuthorized,
                };
                let ack = SubAck {
                    pkid: subscribe.pkid,
                    return_codes: vec![code; subscribe.filters.len()],
                };
                replies.push_back(Packet::SubAck(ack, None));
            }
            Packet::Unsubscribe(unsubscribe, props) => {
                let filters: Vec<&str> = unsubscribe.filters.iter().map(String::as_str).collect();
                gate.unsubscribe(&filters);
                buffer.push_back(Packet::Unsubscribe(unsubscribe, props));
            }
            other => buffer.push_back(other),
        }
    }
    Gated::Pass
}

/// rdv patch: a v5 client is told why before the connection closes.
fn gate_close(v: Verdict, v5: bool, replies: &mut VecDeque<Packet>) -> Verdict {
    if v5 {
        let (reason_code, why) = match v {
            Verdict::RateTooHigh => (DisconnectReasonCode::MessageRateTooHigh, "rate limit"),
            Verdict::QuotaExceeded => (DisconnectReasonCode::QuotaExceeded, "quota exceeded"),
            _ => (DisconnectReasonCode::NotAuthorized, "not authorized"),
        };
        // With a reason string: 0.20's encoder writes a DISCONNECT with a
        // reason code but no (or empty) properties wrongly.
        let props = DisconnectProperties {
            session_expiry_interval: None,
            reason_string: Some(why.to_owned()),
            user_properties: Vec::new(),
            server_reference: None,
        };
        replies.push_back(Packet::Disconnect(Disconnect { reason_code }, Some(props)));
    }
    v
}

async fn handle_auth(
    config: Arc<ConnectionSettings>,
    login: Option<&Login>,
    client_id: &str,
) -> Result<(), Error> {
    if config.auth.is_none() && config.external_auth.is_none() {
        return Ok(());
    }

    // if authentication is configured and connect packet doesn't have login details
    // return an error
    let Some(login) = login else {
        return Err(Error::InvalidAuth);
    };

    let username = &login.username;
    let password = &login.password;

    if let Some(auth) = &config.external_auth {
        if !auth(
            client_id.to_owned(),
            username.to_owned(),
            password.to_owned(),
        )
        .await
        {
            return Err(Error::InvalidAuth);
        }

        return Ok(());
    }

    if let Some(pairs) = &config.auth {
        if let Some(stored_password) = pairs.get(username) {
            if stored_password.as_bytes().ct_eq(password.as_bytes()).into() {
                return Ok(());
            }
        }

        return Err(Error::InvalidAuth);
    }

    Err(Error::InvalidAuth)
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, sync::Arc};

    use crate::{protocol::Login, ConnectionSettings};

    use super::handle_auth;

    fn config() -> ConnectionSettings {
        ConnectionSettings {
            connection_timeout_ms: 0,
            max_payload_size: 0,
            max_inflight_count: 0,
            auth: None,
            external_auth: None,
            dynamic_filters: false,
            gate: None,
        }
    }

    fn login() -> Login {
        Login {
            username: "u".to_owned(),
            password: "p".to_owned(),
        }
    }

    #[tokio::test]
    async fn no_login_no_auth() {
        let cfg = Arc::new(config());
        let r = handle_auth(cfg, None, "").await;
        assert!(r.is_ok());
    }

    #[tokio::test]
    async fn some_login_no_auth() {
        let cfg = Arc::new(config());
        let login = login();
        let r = handle_auth(cfg, Some(&login), "").await;
        assert!(r.is_ok());
    }

    #[tokio::test]
    async fn login_matches_static_auth() {
        let login = login();
        let mut map = HashMap::<String, String>::new();
        map.insert(login.username.clone(), login.password.clone());

        let mut cfg = config();
        cfg.auth = Some(map);

        let r = handle_auth(Arc::new(cfg), Some(&login), "").await;
        assert!(r.is_ok());
    }

    #[tokio::test]
    async fn login_fails_static_no_external() {
        let login = login();
        let mut map = HashMap::<String, String>::new();
        map.insert("wrong".to_owned(), "wrong".to_owned());

        let mut cfg = config();
        cfg.auth = Some(map);

        let r = handle_auth(Arc::new(cfg), Some(&login), "").await;
        assert!(r.is_err());
    }

    #[tokio::test]
    async fn login_fails_static_matches_external() {
        let login = login();

        let mut map = HashMap::<String, String>::new();
        map.insert("wrong".to_owned(), "wrong".to_owned());

        let dynamic = |_: String, _: String, _: String| async { true };

        let mut cfg = config();
        cfg.auth = Some(map);
        cfg.set_auth_handler(dynamic);

        let r = handle_auth(Arc::new(cfg), Some(&login), "").await;
        assert!(r.is_ok());
    }

    #[tokio::test]
    async fn login_fails_static_fails_external() {
        let login = login();

        let mut map = HashMap::<String, String>::new();
        map.insert("wrong".to_owned(), "wrong".to_owned());

        let dynamic = |_: String, _: String, _: String| async { false };

        let mut cfg = config();
        cfg.auth = Some(map);
        cfg.set_auth_handler(dynamic);

        let r = handle_auth(Arc::new(cfg), Some(&login), "").await;
        assert!(r.is_err());
    }

    /// rdv patch (PATCHES.md, "Slowing a publisher"): a gate that holds
    /// every PUBLISH on `slow` until `open`, and counts what it was asked.
    struct Slow {
        open: bool,
        asked: Vec<Vec<u8>>,
    }

    impl crate::gate::LinkGate for Slow {
        fn connect(&mut self, _: &str, _: Option<(&str, &str)>) -> bool {
            true
        }
        fn publish(&mut self, topic: &[u8], _: usize, _: crate::protocol::QoS) -> Verdict {
            self.asked.push(topic.to_vec());
            if topic == b"slow" && !self.open {
                Verdict::Wait(std::time::Duration::from_millis(7))
            } else if topic == b"spent" {
                Verdict::QuotaExceeded
            } else {
                Verdict::Allow
            }
        }
        fn subscribe(&mut self, _: &[&str]) -> Verdict {
            if self.open {
                Verdict::Allow
            } else {
                Verdict::Wait(std::time::Duration::from_millis(9))
            }
        }
        fn unsubscribe(&mut self, _: &[&str]) {}
    }

    fn publish(topic: &str, payload: &str) -> Packet {
        Packet::Publish(
            crate::protocol::Publish::new(topic.to_owned(), payload.to_owned(), false),
            None,
        )
    }

    fn payloads(q: &VecDeque<Packet>) -> Vec<String> {
        q.iter()
            .map(|p| match p {
                Packet::Publish(p, _) => String::from_utf8_lossy(&p.payload).into_owned(),
                Packet::Subscribe(..) => "SUBSCRIBE".to_owned(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    use super::{gate_packets, Gated, Packet, Verdict};
    use std::collections::VecDeque;

    /// A `Wait` holds that packet and every one after it, in order, with
    /// nothing refused or dropped and nothing after it asked about; asked
    /// again, the same packet passes and the rest follow.
    #[test]
    fn a_wait_holds_the_rest_of_the_batch_in_order() {
        let mut gate = Slow {
            open: false,
            asked: Vec::new(),
        };
        let mut aliases = HashMap::new();
        let mut held: VecDeque<Packet> = [
            publish("fast", "1"),
            publish("slow", "2"),
            publish("fast", "3"),
            Packet::PingReq(crate::protocol::PingReq),
        ]
        .into();
        let (mut buffer, mut replies) = (VecDeque::new(), VecDeque::new());
        let g = gate_packets(
            &mut gate,
            false,
            &mut aliases,
            &mut held,
            &mut buffer,
            &mut replies,
        );
        assert_eq!(g, Gated::Wait(std::time::Duration::from_millis(7)));
        assert_eq!(payloads(&buffer), ["1"]);
        assert_eq!(payloads(&held)[..2], ["2", "3"]);
        assert_eq!(held.len(), 3, "the PINGREQ waits behind them");
        assert!(replies.is_empty(), "a wait refuses nothing");
        assert_eq!(gate.asked, [b"fast".to_vec(), b"slow".to_vec()]);

        // Still shut: asked about the same packet only.
        let g = gate_packets(
            &mut gate,
            true,
            &mut aliases,
            &mut held,
            &mut buffer,
            &mut replies,
        );
        assert!(matches!(g, Gated::Wait(_)));
        assert_eq!(gate.asked.len(), 3);
        assert_eq!(gate.asked[2], b"slow");

        gate.open = true;
        let g = gate_packets(
            &mut gate,
            false,
            &mut aliases,
            &mut held,
            &mut buffer,
            &mut replies,
        );
        assert_eq!(g, Gated::Pass);
        assert!(held.is_empty());
        assert_eq!(buffer.len(), 4);
        assert_eq!(payloads(&buffer)[..3], ["1", "2", "3"]);
        assert!(replies.is_empty());
    }

    /// A SUBSCRIBE can be held as a PUBLISH is; a quota still closes, v5
    /// with DISCONNECT 0x97, and drops what was held after it.
    #[test]
    fn a_held_subscribe_and_a_spent_quota() {
        let mut gate = Slow {
            open: false,
            asked: Vec::new(),
        };
        let sub = Packet::Subscribe(
            crate::protocol::Subscribe {
                pkid: 1,
                filters: Vec::new(),
            },
            None,
        );
        let mut aliases = HashMap::new();
        let mut held: VecDeque<Packet> = [sub, publish("fast", "1")].into();
        let (mut buffer, mut replies) = (VecDeque::new(), VecDeque::new());
        let g = gate_packets(
            &mut gate,
            true,
            &mut aliases,
            &mut held,
            &mut buffer,
            &mut replies,
        );
        assert_eq!(g, Gated::Wait(std::time::Duration::from_millis(9)));
        assert!(buffer.is_empty(), "nothing passes a held SUBSCRIBE");
        assert_eq!(payloads(&held), ["SUBSCRIBE", "1"]);

        gate.open = true;
        held.push_back(publish("spent", "2"));
        held.push_back(publish("fast", "3"));
        let g = gate_packets(
            &mut gate,
            true,
            &mut aliases,
            &mut held,
            &mut buffer,
            &mut replies,
        );
        assert_eq!(g, Gated::Close(Verdict::QuotaExceeded));
        assert_eq!(payloads(&buffer), ["SUBSCRIBE", "1"]);
        assert!(held.is_empty(), "nothing after the closing packet is kept");
        match replies.back() {
            Some(Packet::Disconnect(d, _)) => assert_eq!(
                d.reason_code,
                crate::protocol::DisconnectReasonCode::QuotaExceeded
            ),
            other => panic!("no DISCONNECT: {other:?}"),
        }
    }

    #[tokio::test]
    async fn external_auth_clousre_or_fnptr_type_check_or_fail_compile() {
        let closure = |_: String, _: String, _: String| async { false };
        async fn fnptr(_: String, _: String, _: String) -> bool {
            true
        }

        let mut cfg = config();
        cfg.set_auth_handler(closure);
        cfg.set_auth_handler(fnptr);
    }
}
