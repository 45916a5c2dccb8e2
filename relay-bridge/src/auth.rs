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

/// Why an MQTT CONNECT was refused (a stable code, for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttDenied {
    /// No password, or one that is not a known token.
    Unauthorized,
    /// A known token whose ACL is narrower than every topic: the embedded
    /// broker cannot enforce per-topic ACLs, so it does not admit it.
    NarrowAcl,
}

impl MqttDenied {
    pub fn code(self) -> &'static str {
        match self {
            MqttDenied::Unauthorized => "mqtt_unauthorized",
            MqttDenied::NarrowAcl => "mqtt_narrow_acl",
        }
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

    /// The ACL of `token`, comparing in constant time against every
    /// configured token (no early exit on a match).
    fn acl_of(&self, token: &str) -> Option<&Acl> {
        let mut found = None;
        for (t, acl) in &self.tokens {
            if bool::from(t.as_bytes().ct_eq(token.as_bytes())) {
                found = Some(acl);
            }
        }
        found
    }

    /// True if MQTT clients must authenticate: anything but an open
    /// instance. The broker cannot tell a subscriber from a publisher at
    /// CONNECT, so `read-only` needs a token on MQTT as `deny-all` does.
    pub fn mqtt_requires_token(&self) -> bool {
        self.default != DefaultAccess::ReadWrite
    }

    /// Admits an MQTT CONNECT whose password is `password` (the username is
    /// ignored, as ntfy ignores it with a token). Only a token that may read
    /// and write every topic (`*`) is admitted: rumqttd 0.20 has no
    /// per-topic authorization hook, so a narrower ACL could not be held.
    pub fn mqtt_connect(&self, password: &str) -> Result<(), MqttDenied> {
        let acl = self.acl_of(password).ok_or(MqttDenied::Unauthorized)?;
        let all = |l: &[String]| l.iter().any(|p| p == "*");
        if all(&acl.read) && all(&acl.write) {
            Ok(())
        } else {
            Err(MqttDenied::NarrowAcl)
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
        assert!(ro.mqtt_requires_token());
        assert!(a.mqtt_requires_token());
        assert!(!auth(DefaultAccess::ReadWrite).mqtt_requires_token());
        assert_eq!(ro.check(None, &t("x"), Perm::Read), Ok(()));
        assert_eq!(
            ro.check(None, &t("x"), Perm::Write),
            Err(Denied::Unauthorized)
        );
    }

    #[test]
    fn mqtt_admits_only_known_all_topic_tokens() {
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
                    read: vec!["*".into()],
                    write: vec!["alice*".into()],
                },
            ],
        });
        assert_eq!(a.mqtt_connect("tk_ops"), Ok(()));
        assert_eq!(a.mqtt_connect("tk_alice"), Err(MqttDenied::NarrowAcl));
        assert_eq!(a.mqtt_connect(""), Err(MqttDenied::Unauthorized));
        assert_eq!(a.mqtt_connect("tk_op"), Err(MqttDenied::Unauthorized));
        assert_eq!(a.mqtt_connect("tk_opsx"), Err(MqttDenied::Unauthorized));
        assert!(
            !format!("{a:?}").contains("tk_ops"),
            "tokens stay out of logs"
        );
    }
}
