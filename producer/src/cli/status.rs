//! `producer status RUN_ID`: the run as `GET /v1/runs/{id}` shows it, from the store alone.

use super::{EXIT_FAILED, fail, open_store};
use freeway::config::Settings;
use producer::view::RunView;
use std::process::ExitCode;

pub(crate) async fn run(settings: Settings, run_id: &str) -> ExitCode {
    let store = match open_store(&settings).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let view = match RunView::load(&store, run_id).await {
        Ok(Some(v)) => v,
        Ok(None) => return fail(EXIT_FAILED, &format!("run {run_id} not found")),
        Err(e) => return fail(EXIT_FAILED, &e.to_string()),
    };
    match serde_json::to_string_pretty(&view) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_FAILED, &format!("cannot print the run: {e}")),
    }
}
