//! The HTTP API of docs/api.md §1 against real parts: Redis (`REDIS_URL`), the SQL store on a
//! temporary SQLite file and the router served in-process. Each test has its own namespace and
//! store, so they run in parallel.

#[path = "../common/mod.rs"]
mod common;

mod actions;
mod approvals;
mod board;
mod connections;
mod enqueue;
mod events;
mod guards;
mod openapi;
mod operations;
mod operator;
mod ownership;
mod pools;
mod requests;
mod shapes;
mod streams;
mod tenants;
mod users;

use common::Server;
use freeway::chat::ToolCall;
use freeway::classify::{RestLength, RestScope};
use freeway::provider::ApiKey;
use freeway::rest::{RedisRests, Rests};
use freeway::run::RunStatus;
use freeway::store::Store;
use producer::api::auth::Tokens;
use serde_json::{Value, json};

const POOL: &str = "openrouter-free";

fn tokens() -> Tokens {
    Tokens {
        api: Some(ApiKey::new("api-token-1")),
        admin: Some(ApiKey::new("admin-token-1")),
        metrics: None,
    }
}

fn rests(s: &Server) -> RedisRests {
    RedisRests::new(s.conn.clone(), s.ns.clone())
}

async fn rest_pool(s: &Server, ms: u64) {
    rests(s)
        .write(
            &RestScope::Pool(POOL.into()),
            RestLength::For(ms),
            "test rest",
        )
        .await
        .expect("rest written");
}

/// The `error.code` of an error body.
fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no code>")
}

/// Enqueue a run with a tool that needs approval (through the library, so whatever tokens the
/// server wants) and make it wait on `call_1`, as the worker would.
async fn awaiting_run(s: &Server) -> String {
    let body = json!({ "user_id": "u1", "input": "mail Bob", "routes": [{ "model": "vendor/m" }],
        "tools": [{ "name": "send_email", "approval": "required" }] });
    let request =
        freeway::job::RunRequest::from_json(body.to_string().as_bytes(), s.enqueuer.catalog())
            .expect("a valid request");
    let queue::Outcome::Enqueued { run_id } = s.enqueuer.enqueue(request).await.expect("enqueued")
    else {
        panic!("not enqueued");
    };
    let mut rec = s.store.run(&run_id).await.expect("read").expect("run");
    rec.status = RunStatus::AwaitingApproval;
    rec.pending_tool_call = Some(ToolCall {
        id: "call_1".into(),
        name: "send_email".into(),
        arguments: r#"{"to":"bob"}"#.into(),
        extra_content: None,
    });
    s.store.save_run(&rec).await.expect("saved");
    run_id
}
