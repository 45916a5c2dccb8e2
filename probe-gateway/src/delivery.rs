//! The one inbound path (§5.2.1 "the rule"): a raw message for a proved
//! mailbox goes through the gate (screening, then authentication, SPF from
//! the SMTP session or a trusted `Received` hop), then dedupe, limits and
//! queueing in the store, and the SSE notice. `POST /v1/inbound` (`http`)
//! and the SMTP listener (`smtp`, with `forwarding` at gateway addresses)
//! are its adapters: they bound and hand over the bytes and turn the
//! outcome into their protocol's answer. Logs outcomes and codes only.

use rdv_proto::{Address, AgentId};

use crate::gate::{self, Admitted, Arrival, AuthBackend};
use crate::http::AppState;
use crate::store::NewProbe;
use crate::verdict::{Refusal as GateRefusal, SpfSource};

/// A message the gate admitted and the store queued.
#[derive(Debug)]
pub struct Delivered {
    pub admitted: Admitted,
    pub seq: i64,
}

/// Why [`AppState::deliver`] did not queue a message.
#[derive(Debug)]
pub enum Delivery {
    /// The gate (or the store's dedupe and limits) refused it: data.
    Refused(GateRefusal),
    /// The store failed; the message may be retried.
    Internal(String),
}

impl AppState {
    /// The one inbound path (HTTP `POST /v1/inbound` and the SMTP
    /// listener): the gate over `raw` for the canonical `mailbox`,
    /// authentication (SPF from `session` when the mail came over SMTP),
    /// then dedupe, limits and queueing in the store, and the SSE notice.
    /// Logs outcomes and codes only, never content.
    pub async fn deliver(
        &self,
        mailbox: &str,
        raw: &[u8],
        session: Option<&crate::auth::SmtpSession>,
    ) -> Result<Delivered, Delivery> {
        self.deliver_logged(mailbox, raw, session, false).await
    }

    /// [`AppState::deliver`] of mail pushed over HTTP: in verify mode, the
    /// SPF session is the topmost `Received` hop by a `trusted_received_by`
    /// host (`received`), read once the gate has bounded and screened it.
    pub async fn deliver_pushed(&self, mailbox: &str, raw: &[u8]) -> Result<Delivered, Delivery> {
        self.deliver_logged(mailbox, raw, None, true).await
    }

    /// [`AppState::deliver`] of SMTP mail to `mailbox`'s gateway address:
    /// an unmarked message may be the provider's forwarding confirmation
    /// (`forwarding`; never for the mailbox itself, never over HTTP).
    /// Returns the queued item's seq. Logged and counted by outcome code.
    pub async fn deliver_gateway(
        &self,
        mailbox: &str,
        raw: &[u8],
        session: Option<&crate::auth::SmtpSession>,
    ) -> Result<i64, Delivery> {
        let first = self.deliver_inner(mailbox, raw, session, false).await;
        if !matches!(first, Err(Delivery::Refused(GateRefusal::NoMarker))) {
            log_inbound(&first, session.is_some());
            return first.map(|d| d.seq);
        }
        let out = crate::forwarding::deliver(self, mailbox, raw, session, self.now()).await;
        match &out {
            Ok(seq) => {
                metrics::counter!("rdv_gateway_inbound_total", "outcome" => "admitted", "refusal" => "")
                    .increment(1);
                tracing::info!(
                    kind = crate::forwarding::KIND,
                    seq,
                    smtp = true,
                    "inbound admitted"
                );
            }
            Err(Delivery::Refused(r)) => {
                metrics::counter!("rdv_gateway_inbound_total", "outcome" => "refused", "refusal" => r.code())
                    .increment(1);
                tracing::info!(refusal = r.code(), smtp = true, "inbound refused");
            }
            Err(Delivery::Internal(e)) => tracing::error!(error = %e, "inbound failed"),
        }
        out
    }

    async fn deliver_logged(
        &self,
        mailbox: &str,
        raw: &[u8],
        session: Option<&crate::auth::SmtpSession>,
        pushed: bool,
    ) -> Result<Delivered, Delivery> {
        let out = self.deliver_inner(mailbox, raw, session, pushed).await;
        log_inbound(&out, session.is_some());
        out
    }

    async fn deliver_inner(
        &self,
        mailbox: &str,
        raw: &[u8],
        session: Option<&crate::auth::SmtpSession>,
        pushed: bool,
    ) -> Result<Delivered, Delivery> {
        let s = &self.inner;
        let internal = |e: &dyn std::fmt::Display| Delivery::Internal(e.to_string());
        let Ok(mailbox_addr) = Address::parse(mailbox) else {
            return Err(Delivery::Internal("stored mailbox does not parse".into()));
        };
        let agent = match s.store.mailbox_agent(mailbox).await {
            Ok(Some(a)) => AgentId::parse(&a).ok(),
            Ok(None) => None,
            Err(e) => return Err(internal(&e)),
        };
        let Some(agent) = agent else {
            return Err(Delivery::Refused(GateRefusal::NotForMailbox));
        };
        let now = self.now();
        let arrival = Arrival {
            mailbox: &mailbox_addr,
            agent: Some(&agent),
            max_bytes: s.cfg.max_mail_bytes,
        };
        let screened = gate::screen_with(raw, &arrival, now, s.cfg.dev_allow_ws_relays)
            .map_err(Delivery::Refused)?;
        // Only after screening: the message is bounded and well formed.
        let hop = match &s.backend {
            AuthBackend::Verify(_) if pushed && session.is_none() => {
                crate::received::session(raw, &s.cfg.trusted_received_by)
            }
            _ => None,
        };
        let mut auth =
            gate::authenticate(raw, &screened, session.or(hop.as_ref()), &s.backend).await;
        if hop.is_some() && auth.spf_source == Some(SpfSource::Session) {
            auth.spf_source = Some(SpfSource::Received);
        }
        let admitted = Admitted::new(screened, auth);
        if admitted.screened.kind == rdv_proto::mailblock::BlockKind::ProbeEcho {
            // The ACK leg by mail: released, never queued as mail.
            let seq = crate::flows::echo_by_mail(self, &agent, &admitted).await?;
            return Ok(Delivered { admitted, seq });
        }
        let payload =
            rdv_proto::canon::to_string(&admitted.screened.block).map_err(|e| internal(&e))?;
        let probe = NewProbe {
            mailbox: mailbox.to_string(),
            agent: agent.as_str().to_string(),
            kind: admitted.screened.kind_name().to_string(),
            id: admitted.screened.id.clone(),
            requester: admitted.screened.requester.as_str().to_string(),
            sender: admitted.screened.sender.canon().to_string(),
            ts: admitted.screened.ts.unix_timestamp(),
            payload,
            auth: serde_json::to_string(&admitted.auth).unwrap_or_default(),
            binding: serde_json::to_value(admitted.binding)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        let seq = match s
            .store
            .admit(&probe, &s.cfg.limits, now.unix_timestamp())
            .await
        {
            Ok(Ok(seq)) => seq,
            Ok(Err(r)) => return Err(Delivery::Refused(r)),
            Err(e) => return Err(internal(&e)),
        };
        let _ = s.notify.send(probe.agent);
        Ok(Delivered { admitted, seq })
    }
}

/// Counts and logs one inbound outcome: kind and seq, or the refusal code;
/// never content.
pub(crate) fn log_inbound(out: &Result<Delivered, Delivery>, smtp: bool) {
    match out {
        Ok(d) => {
            metrics::counter!("rdv_gateway_inbound_total", "outcome" => "admitted", "refusal" => "")
                .increment(1);
            tracing::info!(
                kind = d.admitted.screened.kind_name(),
                seq = d.seq,
                smtp,
                "inbound admitted"
            );
        }
        Err(Delivery::Refused(r)) => {
            metrics::counter!("rdv_gateway_inbound_total", "outcome" => "refused", "refusal" => r.code())
                .increment(1);
            tracing::info!(refusal = r.code(), smtp, "inbound refused");
        }
        Err(Delivery::Internal(e)) => tracing::error!(error = %e, "inbound failed"),
    }
}
