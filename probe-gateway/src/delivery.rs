//! The one inbound path (§5.2.1 "the rule"): a raw message for a proved
//! mailbox goes through the gate (screening, then authentication, SPF from
//! the SMTP session or a trusted `Received` hop), then dedupe, limits and
//! queueing in the store, and the SSE notice. `POST /v1/inbound` (`http`)
//! and the SMTP listener (`smtp`, with `forwarding` at gateway addresses)
//! are its adapters: they bound and hand over the bytes and turn the
//! outcome into their protocol's answer. Logs outcomes and codes only.

use rdv_proto::mailblock::BlockKind;
use rdv_proto::{Address, AgentId};

use crate::gate::{Admitted, Arrival, Passed, Via};
use crate::state::AppState;
use crate::store::StoreError;
pub use crate::verdict::Delivery;
use crate::verdict::Refusal as GateRefusal;

/// A message the gate admitted and the store queued.
#[derive(Debug)]
pub struct Delivered {
    pub admitted: Admitted,
    pub seq: i64,
}

impl From<StoreError> for Delivery {
    fn from(e: StoreError) -> Self {
        Delivery::Internal(e.to_string())
    }
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
        let via = Via {
            session,
            ..Via::default()
        };
        self.deliver_logged(mailbox, raw, via).await
    }

    /// [`AppState::deliver`] of mail pushed over HTTP: in verify mode, the
    /// SPF session is the topmost `Received` hop by a `trusted_received_by`
    /// host (`received`), read once the gate has bounded and screened it.
    pub async fn deliver_pushed(&self, mailbox: &str, raw: &[u8]) -> Result<Delivered, Delivery> {
        let via = Via {
            pushed: true,
            ..Via::default()
        };
        self.deliver_logged(mailbox, raw, via).await
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
        let via = Via {
            session,
            pushed: false,
            gateway_address: true,
        };
        let out = self.deliver_inner(mailbox, raw, via).await;
        match &out {
            Ok(Passed::Confirmation { seq }) => {
                metrics::counter!("rdv_gateway_inbound_total", "outcome" => "admitted", "refusal" => "")
                    .increment(1);
                tracing::info!(
                    kind = crate::forwarding::KIND,
                    seq,
                    smtp = true,
                    "inbound admitted"
                );
                seq.ok_or_else(|| Delivery::Internal("not queued".into()))
            }
            _ => {
                let out = self.delivered(out);
                log_inbound(&out, true);
                out.map(|d| d.seq)
            }
        }
    }

    /// SMTP mail for an address with no agent (`smtp_unknown_recipients =
    /// "accept"`): the gate runs as for a registered mailbox, its dedupe and
    /// windows count (the per-sender limit included), and nothing is
    /// queued. The sender sees what a registered mailbox's sender sees
    /// (§5.2.1 "Silence", §9): `rate_limited` (451) and store failures as
    /// they are, every other outcome as `not_for_mailbox` (dropped, `250`).
    pub async fn deliver_nowhere(
        &self,
        rcpt: &Address,
        raw: &[u8],
        session: Option<&crate::auth::SmtpSession>,
    ) -> Result<i64, Delivery> {
        let arrival = Arrival {
            mailbox: rcpt,
            agent: None,
            max_bytes: self.inner.cfg.max_mail_bytes,
        };
        let via = Via {
            session,
            ..Via::default()
        };
        match self.gate().run(raw, &arrival, via, self.now()).await {
            Ok(Err(r @ GateRefusal::RateLimited(_))) => Err(Delivery::Refused(r)),
            Ok(_) => Err(Delivery::Refused(GateRefusal::NotForMailbox)),
            Err(e) => Err(e.into()),
        }
    }

    /// Counts and logs mail pushed over HTTP that the body bound refused
    /// before the gate saw it, like any gate refusal.
    pub(crate) fn inbound_too_large(&self) {
        log_inbound(&Err(Delivery::Refused(GateRefusal::TooLarge)), false);
    }

    async fn deliver_logged(
        &self,
        mailbox: &str,
        raw: &[u8],
        via: Via<'_>,
    ) -> Result<Delivered, Delivery> {
        let out = self.deliver_inner(mailbox, raw, via).await;
        let out = self.delivered(out);
        log_inbound(&out, via.session.is_some());
        out
    }

    /// The gate over `raw` for the proved `mailbox`.
    async fn deliver_inner(
        &self,
        mailbox: &str,
        raw: &[u8],
        via: Via<'_>,
    ) -> Result<Passed, Delivery> {
        let s = &self.inner;
        let Ok(mailbox_addr) = Address::parse(mailbox) else {
            return Err(Delivery::Internal("stored mailbox does not parse".into()));
        };
        let agent = match s.store.mailbox_agent(mailbox).await? {
            Some(a) => AgentId::parse(&a).ok(),
            None => None,
        };
        let Some(agent) = agent else {
            return Err(Delivery::Refused(GateRefusal::NotForMailbox));
        };
        let arrival = Arrival {
            mailbox: &mailbox_addr,
            agent: Some(&agent),
            max_bytes: s.cfg.max_mail_bytes,
        };
        let passed = self
            .gate()
            .run(raw, &arrival, via, self.now())
            .await?
            .map_err(Delivery::Refused)?;
        match passed {
            Passed::Message { admitted, .. } if admitted.screened.kind == BlockKind::ProbeEcho => {
                // The ACK leg by mail: released, never queued as mail.
                let seq = crate::flows::echo_by_mail(self, &agent, &admitted).await?;
                Ok(Passed::Message {
                    admitted,
                    seq: Some(seq),
                })
            }
            passed => {
                let _ = s.notify.send(agent.as_str().to_string());
                Ok(passed)
            }
        }
    }

    /// A passed marked message as delivered (its queue seq).
    fn delivered(&self, out: Result<Passed, Delivery>) -> Result<Delivered, Delivery> {
        match out? {
            Passed::Message {
                admitted,
                seq: Some(seq),
            } => Ok(Delivered {
                admitted: *admitted,
                seq,
            }),
            _ => Err(Delivery::Internal("not queued".into())),
        }
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
