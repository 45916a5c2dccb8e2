//! Per-capability limits and gross abuse (SPEC §5.3 `scope.invoke`), as
//! pure rules: each test fails when its rule is broken.
#![allow(clippy::unwrap_used)]

use rdv_agent_core::limits::{Abuse, Limit, LimitBook, Verdict, allowed, sender_check};
use rdv_proto::doc::grant::{InvokeLimits, Scope};
use serde_json::json;

const CAP: &str = "https://rendezvous.nesher.co/ext/review/v1";
const DAY: i64 = 86_400;

fn limits_of(v: serde_json::Value) -> InvokeLimits {
    let scope = Scope::parse(&json!({ "invoke": { CAP: v } }), "scope").unwrap();
    allowed(&scope, CAP).unwrap()
}

fn rejected(v: &Verdict) -> Option<(Limit, Option<Abuse>)> {
    match v {
        Verdict::Rejected { limit, revoke } => Some((*limit, revoke.clone())),
        Verdict::Admit => None,
    }
}

#[test]
fn deny_by_default_and_no_wildcard() {
    let scope = Scope::parse(
        &json!({ "invoke": { CAP: {} }, "may_propose_meetings": false }),
        "scope",
    )
    .unwrap();
    assert!(allowed(&scope, CAP).is_some());
    assert!(allowed(&scope, "https://rendezvous.nesher.co/ext/request/v1").is_none());
    assert!(allowed(&scope, "*").is_none());
    let none = Scope::parse(&json!({ "may_initiate": true }), "scope").unwrap();
    assert!(allowed(&none, CAP).is_none());
}

#[test]
fn only_admitted_tasks_count_and_the_window_slides() {
    let l = limits_of(json!({ "max_frequency": "5/day", "max_open": 100 }));
    let mut b = LimitBook::for_grant(None, "g1");
    let t0 = 1_000_000;
    for i in 0..5 {
        assert_eq!(b.check(CAP, &l, 0, t0 + i), Verdict::Admit, "task {i}");
    }
    // The sixth is over: rejected for rate, and the rejection does not
    // count as an admission.
    let v = b.check(CAP, &l, 0, t0 + 10);
    assert_eq!(rejected(&v).map(|x| x.0), Some(Limit::MaxFrequency));
    assert_eq!(b.caps[CAP].admitted.len(), 5);
    // A task admitted at t stops counting at t + window.
    assert_eq!(
        rejected(&b.check(CAP, &l, 0, t0 + DAY - 1)).map(|x| x.0),
        Some(Limit::MaxFrequency)
    );
    assert_eq!(b.check(CAP, &l, 0, t0 + DAY), Verdict::Admit);
}

#[test]
fn max_open_defaults_to_four() {
    let l = limits_of(json!({}));
    let mut b = LimitBook::for_grant(None, "g1");
    assert_eq!(b.check(CAP, &l, 3, 10), Verdict::Admit);
    let v = b.check(CAP, &l, 4, 11);
    assert_eq!(rejected(&v).map(|x| x.0), Some(Limit::MaxOpen));
    let l2 = limits_of(json!({ "max_open": 2 }));
    assert_eq!(
        rejected(&b.check(CAP, &l2, 2, 12)).map(|x| x.0),
        Some(Limit::MaxOpen)
    );
}

#[test]
fn over_three_times_the_limit_in_its_window_revokes() {
    // 5/day: more than 15 rejected in the day revokes, 15 does not.
    let l = limits_of(json!({ "max_frequency": "5/day", "max_open": 100 }));
    let mut b = LimitBook::for_grant(None, "g1");
    for i in 0..5 {
        assert_eq!(b.check(CAP, &l, 0, 100 + i), Verdict::Admit);
    }
    for i in 0..15 {
        let (lim, revoke) = rejected(&b.check(CAP, &l, 0, 200 + i)).unwrap();
        assert_eq!(lim, Limit::MaxFrequency);
        assert_eq!(revoke, None, "rejection {} must not revoke", i + 1);
    }
    let (_, revoke) = rejected(&b.check(CAP, &l, 0, 300)).unwrap();
    assert_eq!(
        revoke,
        Some(Abuse::Capability {
            capability: CAP.into(),
            rejected: 16,
            limit: 5
        })
    );
}

#[test]
fn rejections_outside_the_capability_window_do_not_add_up() {
    // 1/minute: 2 rejections a minute never revoke under the
    // per-capability rule (more than 3 in a minute); the 24-hour figure
    // (over 50) does.
    let l = limits_of(json!({ "max_frequency": "1/minute", "max_open": 100 }));
    let mut b = LimitBook::for_grant(None, "g1");
    let mut revoked_at = None;
    for m in 0..30 {
        let t = 10_000 + m * 60;
        assert_eq!(b.check(CAP, &l, 0, t), Verdict::Admit);
        for k in 1..=2 {
            if let Some((_, Some(a))) = rejected(&b.check(CAP, &l, 0, t + k)) {
                revoked_at.get_or_insert((m * 2 + k, a));
            }
        }
    }
    let (n, a) = revoked_at.expect("the 24-hour figure revokes");
    assert_eq!(n, 51, "the 51st rejection in 24 hours revokes");
    assert_eq!(a, Abuse::Day { rejected: 51 });
}

#[test]
fn a_capability_with_only_max_open_counts_towards_the_day_alone() {
    let l = limits_of(json!({ "max_open": 1 }));
    let mut b = LimitBook::for_grant(None, "g1");
    for i in 0..50 {
        let (lim, revoke) = rejected(&b.check(CAP, &l, 1, 1000 + i)).unwrap();
        assert_eq!(lim, Limit::MaxOpen);
        assert_eq!(revoke, None, "rejection {}", i + 1);
    }
    let (_, revoke) = rejected(&b.check(CAP, &l, 1, 2000)).unwrap();
    assert_eq!(revoke, Some(Abuse::Day { rejected: 51 }));
    // A day later the figure starts over.
    let mut b2 = b.clone();
    let (_, revoke) = rejected(&b2.check(CAP, &l, 1, 2000 + DAY + 1)).unwrap();
    assert_eq!(revoke, None);
}

#[test]
fn zero_refuses_every_task_and_reads_as_one() {
    let l = limits_of(json!({ "max_frequency": "0/day" }));
    let mut b = LimitBook::for_grant(None, "g1");
    for i in 0..3 {
        let (lim, revoke) = rejected(&b.check(CAP, &l, 0, 50 + i)).unwrap();
        assert_eq!(lim, Limit::MaxFrequency);
        assert_eq!(revoke, None);
    }
    let (_, revoke) = rejected(&b.check(CAP, &l, 0, 60)).unwrap();
    assert!(matches!(revoke, Some(Abuse::Capability { limit: 1, .. })));
}

#[test]
fn a_new_grant_starts_the_counters_afresh() {
    let l = limits_of(json!({ "max_frequency": "1/day" }));
    let mut b = LimitBook::for_grant(None, "g1");
    assert_eq!(b.check(CAP, &l, 0, 10), Verdict::Admit);
    assert!(rejected(&b.check(CAP, &l, 0, 11)).is_some());
    let same = LimitBook::for_grant(Some(b.clone()), "g1");
    assert_eq!(same, b, "the same grant keeps its counters");
    let mut fresh = LimitBook::for_grant(Some(b), "g2");
    assert_eq!(fresh.check(CAP, &l, 0, 12), Verdict::Admit);
}

#[test]
fn a_stored_time_ahead_of_the_clock_counts_as_now() {
    let l = limits_of(json!({ "max_frequency": "1/hour" }));
    let mut b = LimitBook::for_grant(None, "g1");
    // Admitted "in the future" (the clock stepped back).
    assert_eq!(b.check(CAP, &l, 0, 1_000_000), Verdict::Admit);
    // Counted as now: still refused an hour less a second later…
    assert!(rejected(&b.check(CAP, &l, 0, 500_000)).is_some());
    // …and gone one window after now.
    assert_eq!(b.check(CAP, &l, 0, 500_000 + 3600), Verdict::Admit);
}

#[test]
fn senders_check_their_own_grant_first() {
    let l = limits_of(json!({ "max_frequency": "2/hour", "max_open": 3 }));
    assert_eq!(sender_check(&l, 0, &[], 100), Ok(()));
    assert_eq!(sender_check(&l, 3, &[], 100), Err(Limit::MaxOpen));
    assert_eq!(
        sender_check(&l, 0, &[50, 90], 100),
        Err(Limit::MaxFrequency)
    );
    // Sent more than a window ago: no longer counted.
    assert_eq!(sender_check(&l, 0, &[50, 90], 50 + 3600), Ok(()));
}
