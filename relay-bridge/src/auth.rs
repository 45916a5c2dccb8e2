//! Optional access tokens with per-topic read/write ACLs (issue #5): open by
//! default for a community instance, `deny-all` selectable.

use subtle::ConstantTimeEq as _;

use crate::config::{AuthConfig, DefaultAccess};

/// What a request wants to do with a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    Read,
    Write,
}

/// Why access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No token, or a token the bridge does not know (HTTP 401).
    Unauthorized,
    /// A known token without this permission (HTTP 403).
    Forbidden,
}

#[derive(Debug, Clone)]
struct Acl {
    read: Vec<String>,
    write: Vec<String>,
}

/// The access rules.
#[derive(Clone)]
pub struct Auth {
    default: DefaultAccess,
    tokens: Vec<(String, Acl)>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        f.debug_struct("Auth")
            .field("default", &self.default)
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

/// Who an MQTT connection is, decided at CONNECT: a configured token (by
/// index, so the token itself is not kept) or anonymous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MqttClient(Option<usize>);

/// An MQTT CONNECT refusal: no token, or an unknown one, where one is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MqttUnauthorized;

impl MqttUnauthorized {
    /// The refusal's metric label.
    pub fn code(self) -> &'static str {
        "mqtt_unauthorized"
    }
}

fn matches(pattern: &str, topic: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => topic.starts_with(prefix),
        None => pattern == topic,
    }
}

impl Auth {
    pub fn new(cfg: &AuthConfig) -> Auth {
        Auth {
            default: cfg.default_access,
            tokens: cfg
                .tokens
                .iter()
                .map(|t| {
                    (
                        t.token.clone(),
                        Acl {
                            read: t.read.clone(),
                            write: t.write.clone(),
                        },
                    )
                })
                .collect(),
        }
    }

    /// The index of `token`, comparing in constant time against every
    /// configured token (no early exit on a match).
    fn index_of(&self, token: &str) -> Option<usize> {
        let mut found = None;
        for (i, (t, _)) in self.tokens.iter().enumerate() {
            if bool::from(t.as_bytes().ct_eq(token.as_bytes())) {
                found = Some(i);
            }
        }
        found
    }

    /// The ACL of `token` (constant-time comparison, see `index_of`).
    fn acl_of(&self, token: &str) -> Option<&Acl> {
        self.index_of(token)
            .and_then(|i| self.tokens.get(i))
            .map(|(_, acl)| acl)
    }

    /// Admits an MQTT CONNECT whose password is `password` (the username is
    /// ignored, as ntfy ignores it with a token). No password (or an empty
    /// one) is anonymous and gets `default_access`; `deny-all` refuses it at
    /// once. An unknown token is refused unless the instance is open, where
    /// credentials change nothing (as before per-topic ACLs existed on MQTT).
    pub fn mqtt_login(&self, password: Option<&str>) -> Result<MqttClient, MqttUnauthorized> {
        match password.filter(|p| !p.is_empty()) {
            Some(p) => match self.index_of(p) {
                Some(i) => Ok(MqttClient(Some(i))),
                None if self.default == DefaultAccess::ReadWrite => Ok(MqttClient(None)),
                None => Err(MqttUnauthorized),
            },
            None if self.default == DefaultAccess::DenyAll => Err(MqttUnauthorized),
            None => Ok(MqttClient(None)),
        }
    }

    /// Whether `who` may `perm` the MQTT topic name or filter `mqtt`
    /// (issue #5): PUBLISH needs `Write`, SUBSCRIBE `Read`. MQTT topic
    /// `<prefix>T` is ntfy topic `T` and follows the token's patterns for
    /// `T`. Wildcard filters (`#`, `+`), and topics outside the prefix or
    /// not valid ntfy names, need every topic: `default_access` granting
    /// `perm`, or `*` in the token's list.
    pub fn mqtt_allows(&self, who: MqttClient, perm: Perm, prefix: &str, mqtt: &str) -> bool {
        if self.default_allows(perm) {
            return true;
        }
        let Some(acl) = who.0.and_then(|i| self.tokens.get(i)).map(|(_, a)| a) else {
            return false;
        };
        let list = match perm {
            Perm::Read => &acl.read,
            Perm::Write => &acl.write,
        };
        if list.iter().any(|p| p == "*") {
            return true;
        }
        // ntfy names have no `#`, `+`, `/` or `$`: this refuses wildcards
        // and shared subscriptions too.
        match mqtt.strip_prefix(prefix) {
            Some(t) if crate::topic::validate(t).is_ok() => list.iter().any(|p| matches(p, t)),
            _ => false,
        }
    }

    fn default_allows(&self, p: Perm) -> bool {
        match self.default {
            DefaultAccess::ReadWrite => true,
            DefaultAccess::ReadOnly => p == Perm::Read,
            DefaultAccess::DenyAll => false,
        }
    }

    /// Checks `token` (if any) for `perm` on every topic.
    pub fn check(&self, token: Option<&str>, topics: &[String], perm: Perm) -> Result<(), Denied> {
        let acl = match token {
            Some(t) => Some(self.acl_of(t).ok_or(Denied::Unauthorized)?),
            None => None,
        };
        for topic in topics {
            if self.default_allows(perm) {
                continue;
            }
            let Some(acl) = acl else {
                return Err(Denied::Unauthorized);
            };
            let list = match perm {
                Perm::Read => &acl.read,
                Perm::Write => &acl.write,
            };
            if !list.iter().any(|p| matches(p, topic)) {
                return Err(Denied::Forbidden);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TokenConfig;

    fn auth(default: DefaultAccess) -> Auth {
        Auth::new(&AuthConfig {
            default_access: default,
            tokens: vec![TokenConfig {
                token: "tk_alice".into(),
                read: vec!["alice*".into(), "news".into()],
                write: vec!["alice*".into()],
            }],
        })
    }

    fn t(s: &str) -> Vec<String> {
        vec![s.to_owned()]
    }

    #[test]
    fn open_by_default() {
        let a = auth(DefaultAccess::ReadWrite);
        assert_eq!(a.check(None, &t("x"), Perm::Write), Ok(()));
        assert_eq!(
            a.check(Some("bogus"), &t("x"), Perm::Read),
            Err(Denied::Unauthorized)
        );
    }

    #[test]
    fn deny_all_and_acls() {
        let a = auth(DefaultAccess::DenyAll);
        assert_eq!(
            a.check(None, &t("alice1"), Perm::Read),
            Err(Denied::Unauthorized)
        );
        assert_eq!(a.check(Some("tk_alice"), &t("alice1"), Perm::Write), Ok(()));
        assert_eq!(a.check(Some("tk_alice"), &t("news"), Perm::Read), Ok(()));
        assert_eq!(
            a.check(Some("tk_alice"), &t("news"), Perm::Write),
            Err(Denied::Forbidden)
        );
        assert_eq!(
            a.check(
                Some("tk_alice"),
                &["alice1".into(), "bob".into()],
                Perm::Read
            ),
            Err(Denied::Forbidden)
        );
        let ro = auth(DefaultAccess::ReadOnly);
        assert_eq!(ro.check(None, &t("x"), Perm::Read), Ok(()));
        assert_eq!(
            ro.check(None, &t("x"), Perm::Write),
            Err(Denied::Unauthorized)
        );
    }

    #[test]
    fn mqtt_login_and_topic_acls() {
        let a = Auth::new(&AuthConfig {
            default_access: DefaultAccess::DenyAll,
            tokens: vec![
                TokenConfig {
                    token: "tk_ops".into(),
                    read: vec!["*".into()],
                    write: vec!["*".into()],
                },
                TokenConfig {
                    token: "tk_alice".into(),
                    read: vec!["alice*".into(), "news".into()],
                    write: vec!["alice*".into()],
                },
            ],
        });
        assert_eq!(a.mqtt_login(None), Err(MqttUnauthorized));
        assert_eq!(a.mqtt_login(Some("")), Err(MqttUnauthorized));
        assert_eq!(a.mqtt_login(Some("tk_op")), Err(MqttUnauthorized));
        assert_eq!(a.mqtt_login(Some("tk_opsx")), Err(MqttUnauthorized));
        let ops = a.mqtt_login(Some("tk_ops")).unwrap();
        let alice = a.mqtt_login(Some("tk_alice")).unwrap();
        let (r, w) = (Perm::Read, Perm::Write);
        for (who, perm, topic, ok) in [
            (alice, w, "ntfy/alice1", true),
            (alice, w, "ntfy/news", false),
            (alice, r, "ntfy/news", true),
            (alice, r, "ntfy/bob", false),
            (alice, r, "alice1", false),
            (alice, r, "ntfy/alice/x", false),
            (alice, r, "ntfy/alice+", false),
            (alice, r, "ntfy/#", false),
            (alice, r, "#", false),
            (alice, r, "$share/g/ntfy/alice1", false),
            (ops, r, "#", true),
            (ops, w, "elsewhere/x", true),
        ] {
            assert_eq!(
                a.mqtt_allows(who, perm, "ntfy/", topic),
                ok,
                "{who:?} {perm:?} {topic}"
            );
        }
        let ro = auth(DefaultAccess::ReadOnly);
        let anon = ro.mqtt_login(None).unwrap();
        assert!(ro.mqtt_allows(anon, r, "", "#"));
        assert!(!ro.mqtt_allows(anon, w, "", "x"));
        assert_eq!(ro.mqtt_login(Some("nope")), Err(MqttUnauthorized));
        let open = auth(DefaultAccess::ReadWrite);
        let anon = open.mqtt_login(Some("not a token")).unwrap();
        assert!(open.mqtt_allows(anon, w, "ntfy/", "any/thing"));
        assert!(
            !format!("{a:?} {alice:?}").contains("tk_ops"),
            "tokens stay out of logs"
        );
    }
}
