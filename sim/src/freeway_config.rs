//! The `FREEWAY_CONFIG` that points freeway at this simulator's providers.
//!
//! The tests and the demo fail over between the simulator's free tiers; each would otherwise
//! write the same file by hand, and drift from the limits the simulator enforces. This writes
//! it from the running simulator: its base URLs, and pools with the limits it plays.

use crate::config::{Provider, SimConfig};

/// The providers `groq`, `gemini` and `paid` at `base_url_of`'s addresses, with one pool per
/// free model (`groq-llama-70b`, `gemini-flash`, each key its own instance) at `config`'s
/// limits. OpenRouter is built into freeway; `OPENROUTER_BASE_URL` points it here.
pub(crate) fn render(config: &SimConfig, base_url_of: impl Fn(Provider) -> String) -> String {
    format!(
        r#"# FREEWAY_CONFIG for the simulator (written by sim; see docs/configuration.md).
[providers.groq]
base_url = "{groq}"
api_key_env = "GROQ_API_KEY"
dialect = "groq"

[pools.groq-llama-70b]
provider = "groq"
models = ["llama-3.3-70b-versatile"]
connection = "each"
rpm = {groq_rpm}
rpd = {groq_rpd}
window = "rolling"
window_s = {window_s}

[providers.gemini]
base_url = "{gemini}"
api_key_env = "GEMINI_API_KEY"
dialect = "gemini"

[pools.gemini-flash]
provider = "gemini"
models = ["gemini-2.5-flash"]
connection = "each"
rpm = {gemini_rpm}
rpd = {gemini_rpd}
day_reset = "America/Los_Angeles"

[providers.paid]
base_url = "{paid}"
api_key_env = "PAID_API_KEY"
dialect = "generic"
"#,
        groq = base_url_of(Provider::Groq),
        gemini = base_url_of(Provider::Gemini),
        paid = base_url_of(Provider::Generic),
        groq_rpm = config.groq_rpm.max(1),
        groq_rpd = config.groq_rpd.max(1),
        window_s = config.window_s,
        gemini_rpm = config.gemini_rpm.max(1),
        gemini_rpd = config.gemini_rpd.max(1),
    )
}
