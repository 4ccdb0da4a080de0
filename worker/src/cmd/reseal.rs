//! `worker reseal-keys`: the last step of rotating `FREEWAY_SECRET_KEY`.
//!
//! With the new key in `FREEWAY_SECRET_KEY` and the old one in `FREEWAY_SECRET_KEY_PREVIOUS`
//! (every worker and the API given both, so calls keep working meanwhile), this seals every
//! user's connection key that only the old key opens with the new one; afterwards the previous
//! key can be dropped. Prints what it did as one JSON line (connection ids, never keys). Exit 0
//! when every key now opens with the current key, 1 when some open with neither or the store
//! fails, 2 on bad configuration.

use crate::exit::{BAD_INPUT, FAILED, fail};
use freeway::config::Settings;
use freeway::store::SecretKeys;
use std::process::ExitCode;

pub(crate) fn main() -> ExitCode {
    crate::exit::one_shot(|settings: Settings| async move {
        let Some(keys) = settings.secret_keys() else {
            return fail(
                BAD_INPUT,
                "bad configuration: FREEWAY_SECRET_KEY (the new key) is not set",
            );
        };
        reseal(&settings.database_url, &keys).await
    })
}

async fn reseal(url: &str, keys: &SecretKeys) -> ExitCode {
    let store = match crate::wiring::store(url).await {
        Ok(s) => s,
        Err(e) => return crate::exit::start_failed(&e),
    };
    let result = store.reseal_connections(keys).await;
    store.close().await;
    match result {
        Ok(done) => {
            println!("{}", serde_json::json!(done));
            if done.unreadable.is_empty() {
                ExitCode::SUCCESS
            } else {
                fail(
                    FAILED,
                    &format!(
                        "{} connection keys open with neither key and were left as they are",
                        done.unreadable.len()
                    ),
                )
            }
        }
        Err(e) => fail(FAILED, &e.to_string()),
    }
}
