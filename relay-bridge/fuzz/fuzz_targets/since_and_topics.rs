//! The bridge's small parsers of request strings: `since::parse` and
//! `since::parse_duration` (`since=`), `topic::validate` and
//! `topic::parse_list` (topic path segments), `message::parse_priority`
//! (`X-Priority`, priority filters), and the MQTT ACL check
//! `Auth::mqtt_allows` (a PUBLISH topic or SUBSCRIBE filter) under a fixed
//! config. Cheap: no I/O, no runtime. Run with
//! `scripts/fuzz 120 since_and_topics`.
//!
//! Input: a UTF-8 string (anything else is skipped).
//!
//! Checked: no panic, and each parser's contract: an accepted topic is
//! 1-64 of `[-_A-Za-z0-9]` and not reserved; a parsed list is at most 32
//! distinct accepted topics; a duration is a digit run and a unit; a
//! priority is 1-5; an MQTT topic is allowed only through a token pattern
//! it matches or a grant of every topic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rdv_relay_bridge::auth::{Auth, MqttClient, Perm};
use rdv_relay_bridge::config::{AuthConfig, DefaultAccess, TokenConfig};
use rdv_relay_bridge::message::parse_priority;
use rdv_relay_bridge::since::{self, Since};
use rdv_relay_bridge::topic::{self, MAX_TOPICS_PER_SUBSCRIPTION, RESERVED, TOPIC_MAX_LEN};

const PREFIX: &str = "ntfy/";

struct Ctx {
    /// deny-all, with a token that reads `up*` and `exact` and writes `up*`,
    /// and a token that reads everything.
    closed: Auth,
    /// read-only by default, same tokens.
    read_only: Auth,
    limited: MqttClient,
    reader: MqttClient,
}

static CTX: OnceLock<Ctx> = OnceLock::new();

fn ctx() -> &'static Ctx {
    CTX.get_or_init(|| {
        let tokens = vec![
            TokenConfig {
                token: "tk_limited".into(),
                read: vec!["up*".into(), "exact".into()],
                write: vec!["up*".into()],
            },
            TokenConfig {
                token: "tk_reader".into(),
                read: vec!["*".into()],
                write: vec![],
            },
        ];
        let closed = Auth::new(&AuthConfig {
            default_access: DefaultAccess::DenyAll,
            tokens: tokens.clone(),
        });
        let read_only = Auth::new(&AuthConfig {
            default_access: DefaultAccess::ReadOnly,
            tokens,
        });
        let limited = closed
            .mqtt_login(Some("tk_limited"))
            .expect("a known token");
        let reader = closed.mqtt_login(Some("tk_reader")).expect("a known token");
        Ctx {
            closed,
            read_only,
            limited,
            reader,
        }
    })
}

/// The oracle: ntfy's topic rule restated here on purpose, apart from
/// `rdv_bridge_client::topic::check` (which `topic::validate` calls), so a
/// change to the rule shows up as a disagreement instead of passing itself.
fn topic_ok(t: &str) -> bool {
    (1..=TOPIC_MAX_LEN).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !RESERVED.contains(&t)
}

fn check_since(s: &str) {
    let d = since::parse_duration(s);
    if let Some(d) = d {
        assert!(d >= 0, "{s:?}: negative duration {d}");
        let (num, unit) = s.split_at(s.len() - 1);
        assert!(
            !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()),
            "{s:?}"
        );
        assert!(["s", "m", "h", "d"].contains(&unit), "{s:?}");
    }
    for now in [0, 1_791_460_800, i64::MAX, i64::MIN] {
        match since::parse(s, now) {
            Ok(Since::None) => assert!(s.is_empty() || s == "none"),
            Ok(Since::All) => assert_eq!(s, "all"),
            Ok(Since::Latest) => assert_eq!(s, "latest"),
            Ok(Since::Id(id)) => {
                assert_eq!(id, s);
                assert!(rdv_relay_bridge::message::is_id(&id));
            }
            Ok(Since::Time(t)) => {
                assert!(s.len() <= 20, "{s:?}");
                if s.bytes().all(|b| b.is_ascii_digit()) {
                    assert_eq!(Some(t), s.parse::<i64>().ok());
                } else {
                    let d = d.expect("a duration");
                    assert_eq!(t, now.saturating_sub(d));
                }
            }
            Ok(Since::Key(_)) => panic!("{s:?}: a key parsed from a request"),
            Err(_) => {}
        }
    }
}

fn check_topics(s: &str) {
    let one = topic::validate(s);
    assert_eq!(one.is_ok(), topic_ok(s), "{s:?}: {one:?}");
    if let Ok(list) = topic::parse_list(s) {
        assert!(!list.is_empty() && list.len() <= MAX_TOPICS_PER_SUBSCRIPTION);
        for (i, t) in list.iter().enumerate() {
            assert!(topic_ok(t), "{s:?}: {t:?}");
            assert!(!list[..i].contains(t), "{s:?}: {t:?} twice");
        }
        for t in s.split(',') {
            assert!(list.iter().any(|x| x == t), "{s:?}: {t:?} lost");
        }
        // HTTP ACL over the parsed list.
        let c = ctx();
        let read = c
            .closed
            .check(Some("tk_limited"), &list, Perm::Read)
            .is_ok();
        let want = list.iter().all(|t| t.starts_with("up") || t == "exact");
        assert_eq!(read, want, "{list:?}");
        assert!(c.closed.check(None, &list, Perm::Read).is_err());
        assert!(c.read_only.check(None, &list, Perm::Read).is_ok());
    }
}

fn check_priority(s: &str) {
    if let Some(p) = parse_priority(s) {
        assert!((1..=5).contains(&p), "{s:?}: {p}");
    }
    for part in s.split(',') {
        let _ = parse_priority(part);
    }
}

fn check_mqtt(s: &str) {
    let c = ctx();
    let anon = c.closed.mqtt_login(None);
    assert!(anon.is_err(), "deny-all admitted an anonymous client");
    let _ = c.closed.mqtt_login(Some(s));
    let stripped = s.strip_prefix(PREFIX).filter(|t| topic_ok(t));
    for perm in [Perm::Read, Perm::Write] {
        let got = c.closed.mqtt_allows(c.limited, perm, PREFIX, s);
        let want = stripped.is_some_and(|t| match perm {
            Perm::Read => t.starts_with("up") || t == "exact",
            Perm::Write => t.starts_with("up"),
        });
        assert_eq!(got, want, "{s:?} {perm:?}");
        // `*` grants every topic and filter, wildcards included.
        assert_eq!(
            c.closed.mqtt_allows(c.reader, perm, PREFIX, s),
            perm == Perm::Read
        );
        // Read-only default: anyone reads, only tokens write.
        let anon = c
            .read_only
            .mqtt_login(None)
            .expect("read-only admits anonymous");
        assert_eq!(
            c.read_only.mqtt_allows(anon, perm, PREFIX, s),
            perm == Perm::Read
        );
    }
    // A topic outside the prefix or with MQTT wildcards never matches a
    // pattern.
    if s.contains(['#', '+', '/', '$']) && !s.starts_with(PREFIX) {
        assert!(!c.closed.mqtt_allows(c.limited, Perm::Read, PREFIX, s));
    }
}

fuzz_target!(|raw: &[u8]| {
    let Ok(s) = std::str::from_utf8(raw) else {
        return;
    };
    check_since(s);
    check_topics(s);
    check_priority(s);
    check_mqtt(s);
});
