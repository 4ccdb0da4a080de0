//! The runs the throughput, latency and store scenarios all push: one paid route, users spread
//! over a hundred ids, so each scenario and the store probe measure the same work.

use freeway::catalog::Catalog;
use freeway::job::RunRequest;
use freeway::route::RouteSpec;

/// The route every run of these scenarios takes: priced, so no pool paces it.
pub(crate) const PAID: &str = "openai/gpt-4o-mini";

/// The `i`-th run.
pub(crate) fn request(i: u64) -> RunRequest {
    RunRequest::new(
        format!("user-{}", i % 100),
        "Say something about load testing, please.",
        vec![RouteSpec::parse_cli(PAID, &Catalog::builtin())],
    )
}
