//! Response headers as the classifier needs them: names in any case, values as text.
//!
//! Rate-limit signals arrive in real headers (any case: HTTP/2 lowercases them) and in the echo
//! OpenRouter puts into `error.metadata.headers`. Both end up in this one type so the rules of
//! docs/design.md §3 read them the same way.

/// An ordered list of header name/value pairs with case-insensitive lookup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// The first value of `name`, compared without regard to case.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether any header name starts with `prefix`, compared without regard to case. Names are
    /// compared as bytes: a name from a provider's body may hold any character, and a prefix
    /// length need not fall on one of its character boundaries.
    pub fn any_with_prefix(&self, prefix: &str) -> bool {
        let prefix = prefix.as_bytes();
        self.0.iter().any(|(n, _)| {
            n.as_bytes()
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_ignores_case() {
        let h: Headers = [("X-RateLimit-Reset", "1785056700000")]
            .into_iter()
            .collect();
        assert_eq!(h.get("x-ratelimit-reset"), Some("1785056700000"));
        assert!(h.any_with_prefix("x-ratelimit-"));
        assert!(!h.any_with_prefix("retry-after"));
    }

    #[test]
    fn a_prefix_that_ends_inside_a_character_is_no_match_and_no_panic() {
        // "x-ratelimit" is 11 bytes; the name's 12th and 13th bytes are one character.
        let h: Headers = [("x-ratelimité-limit", "1"), ("ü", "2")]
            .into_iter()
            .collect();
        assert!(!h.any_with_prefix("x-ratelimit-"));
        assert!(h.any_with_prefix("x-ratelimit"));
    }
}
