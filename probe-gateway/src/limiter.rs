//! The gate's two [`Limiter`]s (§5.2.1 gate steps 14–15, §5.4): in the
//! store ([`StoreLimiter`], what the service runs: dedupe and windows in one
//! transaction with the queueing, so they survive restarts and are shared
//! by every process on one database) and in memory (`Mutex<Limits>`, for
//! `check`, the corpus, the bench and the fuzz target). Both sit behind
//! the same `gate::Gate::run`.

use std::sync::Mutex;

use rdv_proto::Address;
use rdv_proto::time::Instant;
use serde_json::json;

use crate::forwarding;
use crate::gate::{Admitted, Arrival, Limiter};
use crate::limits::{LimitConfig, Limits};
use crate::store::{Admission, NewProbe, Store, StoreError};
use crate::verdict::{AuthVerdicts, LimitScope, Refusal};

/// The in-memory limiter: nothing is queued, nothing fails.
impl Limiter for Mutex<Limits> {
    type Error = std::convert::Infallible;

    fn admit(
        &self,
        msg: &Admitted,
        arrival: &Arrival<'_>,
        now: Instant,
    ) -> impl Future<Output = Result<Result<Option<i64>, Refusal>, Self::Error>> + Send {
        let s = &msg.screened;
        let r = lock(self).admit(
            s.kind_name(),
            &s.id,
            s.sender.canon(),
            s.requester.as_str(),
            arrival.mailbox.canon(),
            now,
        );
        std::future::ready(Ok(r.map(|()| None)))
    }

    fn echo(
        &self,
        sender: &Address,
        now: Instant,
    ) -> impl Future<Output = Result<Result<(), Refusal>, Self::Error>> + Send {
        std::future::ready(Ok(lock(self).echo(sender.canon(), now)))
    }

    fn confirmation(
        &self,
        arrival: &Arrival<'_>,
        _code: &str,
        _auth: &AuthVerdicts,
        now: Instant,
    ) -> impl Future<Output = Result<Result<Option<i64>, Refusal>, Self::Error>> + Send {
        let mut l = lock(self);
        let under = l.take(
            forwarding::RATE_SCOPE,
            arrival.mailbox.canon(),
            forwarding::PER_DAY,
            now,
        );
        std::future::ready(Ok(if under {
            Ok(None)
        } else {
            Err(Refusal::RateLimited(LimitScope::Mailbox))
        }))
    }
}

fn lock(m: &Mutex<Limits>) -> std::sync::MutexGuard<'_, Limits> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The keys of `msg`'s dedupe and windows.
fn admission(msg: &Admitted, arrival: &Arrival<'_>) -> Admission {
    let s = &msg.screened;
    Admission {
        kind: s.kind_name().to_string(),
        id: s.id.clone(),
        sender: s.sender.canon().to_string(),
        requester: s.requester.as_str().to_string(),
        mailbox: arrival.mailbox.canon().to_string(),
    }
}

/// The store-backed [`Limiter`]: dedupe and windows in the store
/// (`Store::admit`), one transaction with the queueing, so they survive
/// restarts and are shared by every process on one database.
#[derive(Clone)]
pub struct StoreLimiter {
    pub store: Store,
    pub limits: LimitConfig,
}

impl Limiter for StoreLimiter {
    type Error = StoreError;

    async fn admit(
        &self,
        msg: &Admitted,
        arrival: &Arrival<'_>,
        now: Instant,
    ) -> Result<Result<Option<i64>, Refusal>, StoreError> {
        let s = &msg.screened;
        let Some(agent) = arrival.agent else {
            // No agent behind the mailbox: its dedupe and windows are
            // counted as anyone's, nothing is queued (§5.2.1 "Silence").
            let keys = admission(msg, arrival);
            return Ok(self
                .store
                .admit(&keys, None, &self.limits, now.unix_timestamp())
                .await?
                .map(|_| None));
        };
        let Ok(payload) = rdv_proto::canon::to_string(&s.block) else {
            return Ok(Err(Refusal::Block("not canonical JSON".into())));
        };
        let item = NewProbe {
            mailbox: arrival.mailbox.canon().to_string(),
            agent: agent.as_str().to_string(),
            kind: s.kind_name().to_string(),
            id: s.id.clone(),
            requester: s.requester.as_str().to_string(),
            sender: s.sender.canon().to_string(),
            ts: s.ts.unix_timestamp(),
            payload,
            auth: serde_json::to_string(&msg.auth).unwrap_or_default(),
            binding: serde_json::to_value(msg.binding)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        let keys = admission(msg, arrival);
        self.store
            .admit(&keys, Some(&item), &self.limits, now.unix_timestamp())
            .await
    }

    async fn echo(
        &self,
        sender: &Address,
        now: Instant,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let under = self
            .store
            .count_event(
                "echo",
                sender.canon(),
                self.limits.per_sender,
                now.unix_timestamp(),
            )
            .await?;
        Ok(if under {
            Ok(())
        } else {
            Err(Refusal::RateLimited(LimitScope::Sender))
        })
    }

    async fn confirmation(
        &self,
        arrival: &Arrival<'_>,
        code: &str,
        auth: &AuthVerdicts,
        now: Instant,
    ) -> Result<Result<Option<i64>, Refusal>, StoreError> {
        let Some(agent) = arrival.agent else {
            return Ok(Err(Refusal::NotForMailbox));
        };
        let mailbox = arrival.mailbox.canon();
        let item = confirmation_item(mailbox, agent.as_str(), code, auth, now.unix_timestamp());
        let seq = self
            .store
            .queue_limited(
                &item,
                forwarding::RATE_SCOPE,
                mailbox,
                forwarding::PER_DAY,
                now.unix_timestamp(),
            )
            .await?;
        Ok(seq
            .map(Some)
            .ok_or(Refusal::RateLimited(LimitScope::Mailbox)))
    }
}

/// The queued item of a confirmation `code` for `agent` at `mailbox`:
/// the code, the provider and the mailbox; never the link or the body.
fn confirmation_item(
    mailbox: &str,
    agent: &str,
    code: &str,
    auth: &AuthVerdicts,
    now: i64,
) -> NewProbe {
    let payload = json!({
        "code": code,
        "provider": "gmail",
        "mailbox": mailbox,
    });
    NewProbe {
        mailbox: mailbox.to_string(),
        agent: agent.to_string(),
        kind: forwarding::KIND.into(),
        id: String::new(),
        requester: String::new(),
        sender: forwarding::GMAIL_FROM.into(),
        ts: now,
        payload: payload.to_string(),
        auth: serde_json::to_string(auth).unwrap_or_default(),
        binding: String::new(),
    }
}
