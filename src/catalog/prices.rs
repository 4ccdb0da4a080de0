//! What a call on a priced route costs where the provider does not say (docs/design.md §4.8):
//! the configuration's `[prices]`, USD per million input and output tokens by model glob.
//!
//! A key is `PROVIDER:GLOB` or a bare model glob (any provider). As on the command lines,
//! `PROVIDER:` counts only when it names a configured provider, so `vendor/model:free` stays a
//! model glob. Several keys may match one route; the most specific wins, so an operator can
//! price a provider wholesale and one model apart:
//! 1. a provider-qualified key before a bare one;
//! 2. then the glob with more characters other than `*` (`openai/gpt-4o-mini` before
//!    `openai/*` before `*`);
//! 3. then the key that sorts first, so the choice never depends on the file's order.

use super::Glob;
use serde::Serialize;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

impl Price {
    /// What `input_tokens` in and `output_tokens` out cost, in USD.
    pub fn cost_usd(&self, input_tokens: u64, output_tokens: u64) -> f64 {
        (input_tokens as f64 * self.input + output_tokens as f64 * self.output) / 1_000_000.0
    }
}

/// One `[prices]` entry as it was understood.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriceRule {
    /// The key as the file wrote it.
    pub key: String,
    /// The provider it is limited to; `None`: any provider.
    pub provider: Option<String>,
    pub models: Glob,
    #[serde(flatten)]
    pub price: Price,
}

impl PriceRule {
    fn matches(&self, provider: &str, model: &str) -> bool {
        self.provider.as_deref().is_none_or(|p| p == provider) && self.models.matches(model)
    }

    /// Higher is more specific: see the module's rule.
    fn specificity(&self) -> (bool, usize) {
        let literal = self.models.as_str().bytes().filter(|b| *b != b'*').count();
        (self.provider.is_some(), literal)
    }
}

/// The rules in the order they are tried: most specific first.
pub(super) fn order(rules: &mut [PriceRule]) {
    rules.sort_by(|a, b| {
        b.specificity()
            .cmp(&a.specificity())
            .then_with(|| a.key.cmp(&b.key))
    });
}

/// The price of `model` on `provider`: the first of `rules` (in [`order`]) that matches.
pub(super) fn lookup(rules: &[PriceRule], provider: &str, model: &str) -> Option<Price> {
    rules
        .iter()
        .find(|r| r.matches(provider, model))
        .map(|r| r.price)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(key: &str, provider: Option<&str>, glob: &str, input: f64) -> PriceRule {
        PriceRule {
            key: key.into(),
            provider: provider.map(str::to_string),
            models: Glob::parse(glob).unwrap(),
            price: Price { input, output: 0.0 },
        }
    }

    #[test]
    fn the_most_specific_rule_wins_whatever_the_order() {
        let mut rules = vec![
            rule("*", None, "*", 1.0),
            rule("openai/*", None, "openai/*", 2.0),
            rule("openai/gpt-4o-mini", None, "openai/gpt-4o-mini", 3.0),
            rule("deepinfra:*", Some("deepinfra"), "*", 4.0),
        ];
        order(&mut rules);
        let input = |rules: &[PriceRule], p: &str, m: &str| lookup(rules, p, m).map(|p| p.input);
        assert_eq!(input(&rules, "openrouter", "openai/gpt-4o-mini"), Some(3.0));
        assert_eq!(input(&rules, "openrouter", "openai/gpt-4o"), Some(2.0));
        assert_eq!(input(&rules, "openrouter", "meta/llama"), Some(1.0));
        // The provider's own key beats a longer bare glob.
        assert_eq!(input(&rules, "deepinfra", "openai/gpt-4o-mini"), Some(4.0));
        rules.retain(|r| r.key != "*");
        assert_eq!(input(&rules, "openrouter", "meta/llama"), None);
    }

    #[test]
    fn a_cost_is_per_million_tokens() {
        let p = Price {
            input: 0.15,
            output: 0.60,
        };
        assert!((p.cost_usd(1_000_000, 0) - 0.15).abs() < 1e-12);
        assert!((p.cost_usd(2_000, 1_000) - 0.0009).abs() < 1e-12);
        assert_eq!(p.cost_usd(0, 0), 0.0);
    }
}
