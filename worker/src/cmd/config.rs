//! `worker config check`: what freeway understood of `FREEWAY_CONFIG`.
//!
//! An operator who adds a provider wants to see, before any run spends a call, which pools a
//! route will count against and whether each platform key is where the file says; this prints
//! exactly what the workers will use, as JSON, and shares the start-up checks (exit 2). Tiers and
//! prices are shown as understood: a price key's `provider` says whether `PROVIDER:` was read as a
//! provider or as part of a model glob, and prices are listed in the order they are tried.

use crate::exit::{BAD_INPUT, fail};
use freeway::config::Settings;
use serde_json::json;
use std::process::ExitCode;

pub(crate) fn check() -> ExitCode {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => return fail(BAD_INPUT, &format!("bad configuration: {e}")),
    };
    if let Err(e) = settings.require_platform_keys() {
        return fail(BAD_INPUT, &format!("bad configuration: {e}"));
    }
    let providers: Vec<_> = settings
        .catalog
        .providers()
        .map(|p| {
            json!({
                "name": p.name,
                "base_url": p.base_url,
                "dialect": p.dialect,
                "api_key_env": p.api_key_env,
                "platform_key": settings.platform_keys.contains_key(&p.name),
            })
        })
        .collect();
    let pools: Vec<_> = settings.catalog.pools().collect();
    let tiers: Vec<_> = settings
        .catalog
        .tiers()
        .map(|(name, tier)| {
            json!({
                "name": name,
                "weight": tier.weight,
                "spend_usd_per_day": tier.spend_usd_per_day,
                "day_reset": tier.day_reset.name(),
            })
        })
        .collect();
    let prices = settings.catalog.prices();
    println!(
        "{}",
        json!({ "providers": providers, "pools": pools, "tiers": tiers, "prices": prices })
    );
    ExitCode::SUCCESS
}
