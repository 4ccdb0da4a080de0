//! What the simulated OpenRouter charges for a paid model's answer: the figure of `usage.cost`.
//!
//! freeway caps what tenants spend on priced routes by the cost the provider reports, so the
//! simulator must report one a test can predict: per model, USD per million input and output
//! tokens, as OpenRouter lists its prices. A `:free` model (and `openrouter/free`) always costs
//! 0, as the captures show; a paid model without a price of its own costs the default price.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::account::is_free_model;

/// The key of the default price (for paid models without one of their own).
pub const DEFAULT_PRICE_KEY: &str = "*";

/// The default price of a paid model: USD 0.10 per million input tokens and 0.40 per million
/// output tokens, the order of a small hosted model's list price.
pub const DEFAULT_PRICE: Price = Price {
    input: 0.10,
    output: 0.40,
};

/// The highest price accepted, in USD per million tokens: far above any listed price, and low
/// enough that no answer's cost overflows.
const MAX_PRICE: f64 = 1_000_000.0;

/// A model's price in USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub input: f64,
    /// Per million completion tokens.
    pub output: f64,
}

impl Price {
    fn validate(&self) -> Result<(), String> {
        for (name, v) in [("input", self.input), ("output", self.output)] {
            if !(v.is_finite() && (0.0..=MAX_PRICE).contains(&v)) {
                return Err(format!(
                    "{name} price must be between 0 and {MAX_PRICE} USD per million tokens, got {v}"
                ));
            }
        }
        Ok(())
    }
}

/// `IN/OUT`, USD per million input and output tokens.
impl FromStr for Price {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("a price is IN/OUT in USD per million tokens, got `{s}`");
        let (input, output) = s.split_once('/').ok_or_else(bad)?;
        let price = Price {
            input: input.trim().parse().map_err(|_| bad())?,
            output: output.trim().parse().map_err(|_| bad())?,
        };
        price.validate()?;
        Ok(price)
    }
}

/// One `--price MODEL=IN/OUT` (`*=IN/OUT` sets the default).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelPrice {
    pub model: String,
    pub price: Price,
}

impl FromStr for ModelPrice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (model, price) = s
            .split_once('=')
            .ok_or_else(|| format!("a price is MODEL=IN/OUT, got `{s}`"))?;
        let model = model.trim();
        check_model(model)?;
        Ok(ModelPrice {
            model: model.to_owned(),
            price: price.parse()?,
        })
    }
}

fn check_model(model: &str) -> Result<(), String> {
    if model.is_empty() {
        return Err("a price names a model (or * for the default)".to_owned());
    }
    if is_free_model(model) {
        return Err(format!("`{model}` is a free model: it always costs 0"));
    }
    Ok(())
}

/// What one answer cost, in USD, split as OpenRouter's `cost_details` splits it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Cost {
    pub prompt: f64,
    pub completion: f64,
}

impl Cost {
    pub(crate) fn total(self) -> f64 {
        self.prompt + self.completion
    }
}

/// The prices in force: the default and each model's own.
#[derive(Clone, Debug)]
pub(crate) struct Prices {
    models: BTreeMap<String, Price>,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            models: BTreeMap::from([(DEFAULT_PRICE_KEY.to_owned(), DEFAULT_PRICE)]),
        }
    }
}

impl Prices {
    /// Sets `model`'s price (`*`: the default), unless the model is free or the price invalid.
    pub(crate) fn set(&mut self, model: &str, price: Price) -> Result<(), String> {
        check_model(model)?;
        price.validate()?;
        self.models.insert(model.to_owned(), price);
        Ok(())
    }

    /// Every price in force, the default under `*`.
    pub(crate) fn list(&self) -> BTreeMap<String, Price> {
        self.models.clone()
    }

    /// What an answer of `model` with these token counts costs.
    pub(crate) fn cost(&self, model: &str, prompt_tokens: u64, completion_tokens: u64) -> Cost {
        if is_free_model(model) {
            return Cost::default();
        }
        let price = self
            .models
            .get(model)
            .or_else(|| self.models.get(DEFAULT_PRICE_KEY))
            .copied()
            .unwrap_or(DEFAULT_PRICE);
        Cost {
            prompt: prompt_tokens as f64 * price.input / 1e6,
            completion: completion_tokens as f64 * price.output / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_parse_and_refuse_nonsense() {
        let p: ModelPrice = "openai/gpt-4o-mini=0.15/0.6".parse().expect("valid");
        assert_eq!(p.model, "openai/gpt-4o-mini");
        assert_eq!(
            p.price,
            Price {
                input: 0.15,
                output: 0.6
            }
        );
        for bad in [
            "gpt",
            "=1/2",
            "m=1",
            "m=a/2",
            "m=-1/2",
            "m=NaN/2",
            "m=inf/1",
            "x/y:free=1/2",
            "openrouter/free=1/2",
        ] {
            assert!(bad.parse::<ModelPrice>().is_err(), "{bad}");
        }
    }

    #[test]
    fn free_models_cost_nothing_and_paid_ones_their_price_or_the_default() {
        let mut prices = Prices::default();
        assert_eq!(prices.cost("a/b:free", 1000, 1000), Cost::default());
        let c = prices.cost("a/paid", 2_000_000, 1_000_000);
        assert!((c.prompt - 0.2).abs() < 1e-12 && (c.completion - 0.4).abs() < 1e-12);
        prices
            .set(
                "a/paid",
                Price {
                    input: 3.0,
                    output: 15.0,
                },
            )
            .expect("valid");
        let c = prices.cost("a/paid", 1_000_000, 1_000_000);
        assert!((c.total() - 18.0).abs() < 1e-9);
        assert!(prices.set("a/b:free", DEFAULT_PRICE).is_err());
    }
}
