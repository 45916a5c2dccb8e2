//! An MQTT 3.1.1 client (rumqttc) for tests that drive the embedded broker
//! one packet at a time.

use std::collections::VecDeque;
use std::time::Duration;

use rumqttc::{QoS, SubscribeFilter, SubscribeReasonCode};

/// Hang guard for every wait on a client (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(30);

/// An MQTT 3.1.1 client (rumqttc) driven step by step; publications that
/// arrive while waiting for something else are kept in `inbox`.
pub struct V4 {
    pub client: rumqttc::AsyncClient,
    pub el: rumqttc::EventLoop,
    pub inbox: VecDeque<(String, Vec<u8>)>,
}

impl V4 {
    /// Connects; Err (the error's text) if the broker refuses or closes.
    pub async fn connect(port: u16, id: &str, password: Option<&str>) -> Result<V4, String> {
        Self::connect_will(port, id, password, None).await
    }

    /// Connects with a will message on `will` (the topic), if given.
    pub async fn connect_will(
        port: u16,
        id: &str,
        password: Option<&str>,
        will: Option<&str>,
    ) -> Result<V4, String> {
        let mut o = rumqttc::MqttOptions::new(id, "127.0.0.1", port);
        if let Some(t) = will {
            o.set_last_will(rumqttc::LastWill::new(t, "will", QoS::AtLeastOnce, false));
        }
        o.set_keep_alive(Duration::from_secs(30));
        o.set_max_packet_size(128 * 1024, 128 * 1024);
        o.set_clean_session(true);
        if let Some(p) = password {
            o.set_credentials("x", p);
        }
        let (client, mut el) = rumqttc::AsyncClient::new(o, 100);
        // Small packets one at a time: no wait on the delayed ACK.
        el.network_options.set_tcp_nodelay(true);
        let r = tokio::time::timeout(WAIT, async {
            loop {
                match el.poll().await {
                    Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await
        .expect("no CONNACK and no error");
        r.map(|()| V4 {
            client,
            el,
            inbox: VecDeque::new(),
        })
    }

    /// Polls until `want` picks an event; Err once the connection ended.
    pub async fn until<T>(
        &mut self,
        mut want: impl FnMut(&rumqttc::Event) -> Option<T>,
    ) -> Result<T, String> {
        tokio::time::timeout(WAIT, async {
            loop {
                match self.el.poll().await {
                    Ok(ev) => {
                        if let Some(t) = want(&ev) {
                            return Ok(t);
                        }
                        if let rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) = ev {
                            self.inbox.push_back((p.topic, p.payload.to_vec()));
                        }
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await
        .expect("client waited too long")
    }

    /// One SUBSCRIBE packet with `filters`; the SUBACK's codes.
    pub async fn subscribe(&mut self, filters: &[&str]) -> Vec<SubscribeReasonCode> {
        let f = filters
            .iter()
            .map(|f| SubscribeFilter::new((*f).to_owned(), QoS::AtLeastOnce));
        self.client.subscribe_many(f).await.unwrap();
        self.until(|ev| match ev {
            rumqttc::Event::Incoming(rumqttc::Packet::SubAck(a)) => Some(a.return_codes.clone()),
            _ => None,
        })
        .await
        .unwrap()
    }

    pub async fn unsubscribe(&mut self, filter: &str) {
        self.client.unsubscribe(filter).await.unwrap();
        self.until(|ev| {
            matches!(ev, rumqttc::Event::Incoming(rumqttc::Packet::UnsubAck(_))).then_some(())
        })
        .await
        .unwrap();
    }

    /// A QoS 1 publication: Ok at its PUBACK, Err if the connection ends.
    pub async fn publish(&mut self, topic: &str, payload: &[u8]) -> Result<(), String> {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload.to_vec())
            .await
            .unwrap();
        self.until(|ev| {
            matches!(ev, rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))).then_some(())
        })
        .await
    }

    /// The next publication received.
    pub async fn next(&mut self) -> (String, Vec<u8>) {
        if let Some(m) = self.inbox.pop_front() {
            return m;
        }
        self.until(|ev| match ev {
            rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) => {
                Some((p.topic.clone(), p.payload.to_vec()))
            }
            _ => None,
        })
        .await
        .unwrap()
    }

    /// Publications received on `topic` up to and including `marker`.
    pub async fn up_to(&mut self, topic: &str, marker: &[u8]) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        loop {
            let (t, p) = self.next().await;
            if t == topic {
                let done = p == marker;
                got.push(p);
                if done {
                    return got;
                }
            }
        }
    }

    /// Waits until the server closes the connection.
    pub async fn closed(&mut self) -> String {
        self.until(|_| None::<()>).await.unwrap_err()
    }
}
