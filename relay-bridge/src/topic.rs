//! Topic names (issue #5): ntfy's rule `^[-_A-Za-z0-9]{1,64}$` (written
//! once, in `rdv_bridge_client::topic`), minus the names ntfy reserves for
//! its own pages and the paths this bridge serves. Discovery topics
//! (SPEC §4.4, 26 base32 characters) fit the rule.

pub use rdv_bridge_client::topic::TOPIC_MAX_LEN;
use rdv_bridge_client::topic::{self as rule, TopicFault};

/// At most this many topics in one subscription (`/t1,t2,…/json`).
pub const MAX_TOPICS_PER_SUBSCRIPTION: usize = 32;

/// Names ntfy refuses as topics (its `disallowedTopics`), and ours.
pub const RESERVED: &[&str] = &[
    "docs", "static", "file", "app", "metrics", "account", "settings", "signup", "login", "v1",
    "healthz", "openapi", "ws", "json", "sse", "raw",
];

/// Why a topic name is refused; a refusal reason is data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicError {
    /// Outside ntfy's rule.
    Rule(TopicFault),
    Reserved,
    TooManyTopics,
}

impl TopicError {
    pub fn reason(self) -> &'static str {
        match self {
            TopicError::Rule(f) => f.reason(),
            TopicError::Reserved => "topic name is reserved",
            TopicError::TooManyTopics => "too many topics in one subscription",
        }
    }
}

/// Checks one topic name.
pub fn validate(t: &str) -> Result<(), TopicError> {
    rule::check(t).map_err(TopicError::Rule)?;
    if RESERVED.contains(&t) {
        return Err(TopicError::Reserved);
    }
    Ok(())
}

/// Parses `t1,t2,…` (the subscription path segment), deduplicated, in order.
pub fn parse_list(s: &str) -> Result<Vec<String>, TopicError> {
    if s.len() > (TOPIC_MAX_LEN + 1) * MAX_TOPICS_PER_SUBSCRIPTION {
        return Err(TopicError::TooManyTopics);
    }
    let mut out: Vec<String> = Vec::new();
    for t in s.split(',') {
        validate(t)?;
        if !out.iter().any(|o| o == t) {
            out.push(t.to_owned());
        }
        if out.len() > MAX_TOPICS_PER_SUBSCRIPTION {
            return Err(TopicError::TooManyTopics);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule() {
        assert!(validate("mytopic_1-x").is_ok());
        assert!(validate(&"a".repeat(64)).is_ok());
        let fault = |f| Err(TopicError::Rule(f));
        assert_eq!(validate(&"a".repeat(65)), fault(TopicFault::TooLong));
        assert_eq!(validate(""), fault(TopicFault::Empty));
        assert_eq!(validate("a/b"), fault(TopicFault::BadCharacter));
        assert_eq!(validate("a.b"), fault(TopicFault::BadCharacter));
        assert_eq!(validate("é"), fault(TopicFault::BadCharacter));
        assert_eq!(validate("docs"), Err(TopicError::Reserved));
        assert_eq!(validate("v1"), Err(TopicError::Reserved));
        // A discovery topic (SPEC §4.4) is a valid name.
        let a = rdv_proto::Address::parse("john@doe.com").unwrap();
        assert!(validate(&a.dtopic()).is_ok());
    }

    #[test]
    fn lists() {
        assert_eq!(parse_list("a,b,a").unwrap(), vec!["a", "b"]);
        assert_eq!(parse_list("a,,b"), Err(TopicError::Rule(TopicFault::Empty)));
        let many = (0..33)
            .map(|i| format!("t{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(parse_list(&many), Err(TopicError::TooManyTopics));
    }
}
