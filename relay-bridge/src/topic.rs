//! Topic names (issue #5): ntfy's rule `^[-_A-Za-z0-9]{1,64}$`, minus the
//! names ntfy reserves for its own pages and the paths this bridge serves.
//! Discovery topics (SPEC §4.4, 26 base32 characters) fit the rule.

/// ntfy's longest topic name.
pub const TOPIC_MAX_LEN: usize = 64;
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
    Empty,
    TooLong,
    BadCharacter,
    Reserved,
    TooManyTopics,
}

impl TopicError {
    pub fn reason(self) -> &'static str {
        match self {
            TopicError::Empty => "topic is empty",
            TopicError::TooLong => "topic is longer than 64 characters",
            TopicError::BadCharacter => "topic may hold only A-Z, a-z, 0-9, - and _",
            TopicError::Reserved => "topic name is reserved",
            TopicError::TooManyTopics => "too many topics in one subscription",
        }
    }
}

/// Checks one topic name.
pub fn validate(t: &str) -> Result<(), TopicError> {
    if t.is_empty() {
        return Err(TopicError::Empty);
    }
    if t.len() > TOPIC_MAX_LEN {
        return Err(TopicError::TooLong);
    }
    if !t
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(TopicError::BadCharacter);
    }
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
        assert_eq!(validate(&"a".repeat(65)), Err(TopicError::TooLong));
        assert_eq!(validate(""), Err(TopicError::Empty));
        assert_eq!(validate("a/b"), Err(TopicError::BadCharacter));
        assert_eq!(validate("a.b"), Err(TopicError::BadCharacter));
        assert_eq!(validate("é"), Err(TopicError::BadCharacter));
        assert_eq!(validate("docs"), Err(TopicError::Reserved));
        assert_eq!(validate("v1"), Err(TopicError::Reserved));
        // A discovery topic (SPEC §4.4) is a valid name.
        let a = rdv_proto::Address::parse("john@doe.com").unwrap();
        assert!(validate(&a.dtopic()).is_ok());
    }

    #[test]
    fn lists() {
        assert_eq!(parse_list("a,b,a").unwrap(), vec!["a", "b"]);
        assert_eq!(parse_list("a,,b"), Err(TopicError::Empty));
        let many = (0..33)
            .map(|i| format!("t{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(parse_list(&many), Err(TopicError::TooManyTopics));
    }
}
