//! Model globs: `*` for any run of characters, `?` for one, everything else literal.
//!
//! Pools name their models with globs (`*:free`). Model ids are printable ASCII without spaces,
//! and the bracket and brace syntaxes of shell globs are refused rather than read literally, so
//! a pattern copied from a shell means what it seems to or is rejected.

use serde::{Serialize, Serializer};

/// A checked glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    pub fn parse(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() || pattern.len() > 200 {
            return Err("a glob is 1-200 characters".into());
        }
        if let Some(c) = pattern.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(format!("{c:?} cannot be in a model id"));
        }
        if let Some(c) = pattern
            .chars()
            .find(|c| matches!(c, '[' | ']' | '{' | '}' | '\\'))
        {
            return Err(format!("{c:?} is not glob syntax here (only * and ? are)"));
        }
        Ok(Glob(pattern.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        matches(self.0.as_bytes(), text.as_bytes())
    }

    /// Whether some model id could match both globs: the first must match the second's literal
    /// characters with its wildcards read as "anything", or the reverse.
    pub fn overlaps(&self, other: &Glob) -> bool {
        self.matches(&other.0) || other.matches(&self.0) || both_open(self, other)
    }
}

/// Two patterns that both hold `*` overlap when their fixed ends are compatible: `a*` and `*b`
/// share `a…b`; `a*x` and `b*` share nothing.
fn both_open(a: &Glob, b: &Glob) -> bool {
    let (Some(a_star), Some(b_star)) = (a.0.find('*'), b.0.find('*')) else {
        return false;
    };
    let compatible = |x: &[u8], y: &[u8]| {
        x.iter()
            .zip(y)
            .all(|(p, q)| p == q || *p == b'?' || *q == b'?')
    };
    let (a_head, b_head) = (&a.0.as_bytes()[..a_star], &b.0.as_bytes()[..b_star]);
    let a_tail = &a.0.as_bytes()[a.0.rfind('*').map_or(0, |i| i + 1)..];
    let b_tail = &b.0.as_bytes()[b.0.rfind('*').map_or(0, |i| i + 1)..];
    let tails = |x: &[u8], y: &[u8]| {
        let n = x.len().min(y.len());
        compatible(&x[x.len() - n..], &y[y.len() - n..])
    };
    compatible(a_head, b_head) && tails(a_tail, b_tail)
}

/// Iterative matching with one backtrack point per `*`: linear in practice, never recursive.
fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl Serialize for Glob {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str) -> Glob {
        Glob::parse(p).unwrap()
    }

    #[test]
    fn stars_and_question_marks_match_and_the_rest_is_literal() {
        assert!(g("*:free").matches("meta-llama/llama-3.3-70b-instruct:free"));
        assert!(!g("*:free").matches("openai/gpt-4o-mini"));
        assert!(!g("*:free").matches("x:free:not"));
        assert!(g("openrouter/free").matches("openrouter/free"));
        assert!(!g("openrouter/free").matches("openrouter/free2"));
        assert!(g("gemini-?.5-*").matches("gemini-2.5-flash"));
        assert!(g("*").matches(""));
        assert!(g("a*b*c").matches("aXXbYYc"));
        assert!(!g("a*b*c").matches("aXXbYY"));
    }

    #[test]
    fn shell_syntax_and_unprintable_characters_are_refused() {
        for bad in ["", "llama[12]", "{a,b}", "a b", "tab\there", "back\\slash"] {
            assert!(Glob::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn overlapping_globs_are_found() {
        assert!(g("*:free").overlaps(&g("x/y:free")));
        assert!(g("x/y:free").overlaps(&g("*:free")));
        assert!(g("llama-*").overlaps(&g("*-70b")));
        assert!(g("*:free").overlaps(&g("*:free")));
        assert!(!g("llama-*").overlaps(&g("gemma-*")));
        assert!(!g("*:free").overlaps(&g("*:paid")));
        assert!(!g("a").overlaps(&g("b")));
    }
}
