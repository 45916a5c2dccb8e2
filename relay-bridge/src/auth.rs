//! Optional access tokens with per-topic read/write ACLs (issue #5): open by
//! default for a community instance, `deny-all` selectable.

use std::collections::HashMap;

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
#[derive(Debug, Clone)]
pub struct Auth {
    default: DefaultAccess,
    tokens: HashMap<String, Acl>,
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
            Some(t) => Some(self.tokens.get(t).ok_or(Denied::Unauthorized)?),
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
}
