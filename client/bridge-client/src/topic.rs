//! ntfy's topic rule, `^[-_A-Za-z0-9]{1,64}$`: ntfy's, not the spec's
//! (SPEC §6.3 names ntfy and MQTT as carriers; §4.4's 26-character
//! discovery topics fit it). Written once here, for the carrier clients and
//! for `rdv-relay-bridge`, which adds its reserved names on top.

/// ntfy's longest topic name.
pub const TOPIC_MAX_LEN: usize = 64;

/// How a name breaks the rule; a refusal reason is data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicFault {
    Empty,
    TooLong,
    BadCharacter,
}

impl TopicFault {
    /// The reason as the bridge answers it (`{"error": …}`).
    pub fn reason(self) -> &'static str {
        match self {
            TopicFault::Empty => "topic is empty",
            TopicFault::TooLong => "topic is longer than 64 characters",
            TopicFault::BadCharacter => "topic may hold only A-Z, a-z, 0-9, - and _",
        }
    }
}

/// Checks `t` against the rule, so it is safe in a URL path and an MQTT
/// topic level.
pub fn check(t: &str) -> Result<(), TopicFault> {
    if t.is_empty() {
        return Err(TopicFault::Empty);
    }
    if t.len() > TOPIC_MAX_LEN {
        return Err(TopicFault::TooLong);
    }
    if !t
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(TopicFault::BadCharacter);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_to_64_of_the_alphabet() {
        assert_eq!(check("abc-_XYZ09"), Ok(()));
        assert_eq!(check("a"), Ok(()));
        assert_eq!(check(&"a".repeat(64)), Ok(()));
        assert_eq!(check(&"a".repeat(65)), Err(TopicFault::TooLong));
        assert_eq!(check(""), Err(TopicFault::Empty));
        for bad in ["a/b", "a?b", "a,b", "a.b", "a b", "a+b", "a#b", "é", "a\0"] {
            assert_eq!(check(bad), Err(TopicFault::BadCharacter), "{bad:?}");
        }
        assert!(
            TopicFault::TooLong
                .reason()
                .contains(&TOPIC_MAX_LEN.to_string())
        );
    }
}
