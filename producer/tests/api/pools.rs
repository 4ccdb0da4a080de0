//! (v3) `GET /v1/pools` shows, per pool instance, the runs waiting their turn, of how many
//! tenants, and each tenant's slots this window (docs/design.md §4.7). Runs are put in a
//! pool's queue through the limiter itself, as workers do, on the test's Redis.

use crate::common::Server;
use freeway::catalog::Catalog;
use freeway::pace::{Joined, Lane, Pacer, Slot, Waiter};
use serde_json::{Value, json};

/// The shared free pool with 2 calls an hour, and a per-key pool of one call an hour: windows
/// so long a test never crosses one (unless it starts at the very end of one, which it waits
/// out).
fn catalog() -> Catalog {
    Catalog::from_toml(
        r#"
[pools.openrouter-free]
rpm = 2
window_s = 3600

[providers.groq]
base_url = "http://127.0.0.1:9/groq/openai/v1"
api_key_env = "GROQ_API_KEY"
dialect = "groq"

[pools.groq-llama]
provider = "groq"
models = ["llama-3.3-70b-versatile"]
connection = "each"
rpm = 1
window_s = 3600
"#,
    )
    .expect("a catalog")
}

/// Waits `instance`'s queue as a run of `tenant`; says how it joined.
async fn join(s: &Server, instance: &str, run_id: &str, tenant: &str) -> Joined {
    let catalog = s.enqueuer.catalog();
    let (limits, clock) = catalog.instance(instance).expect("an instance");
    let now = freeway::clock::epoch_ms();
    let who = Waiter {
        run_id,
        tenant,
        weight: 1,
        lane: Lane::Interactive,
        deadline_ms: now + 3_600_000,
    };
    s.enqueuer
        .pacer()
        .join(instance, &limits, clock.day_end_ms(now), 0, &who)
        .await
        .expect("the limiter")
}

/// Take every slot of `instance`'s window (as calls of nobody's), after waiting out a window
/// about to end.
async fn fill(s: &Server, instance: &str) {
    let catalog = s.enqueuer.catalog();
    let (limits, clock) = catalog.instance(instance).expect("an instance");
    let pacer = s.enqueuer.pacer();
    let now = freeway::clock::epoch_ms();
    let used = pacer.usage(instance, &limits, clock.day_end_ms(now)).await;
    let left = used.expect("the limiter").window_resets_in_ms;
    if left < 30_000 {
        tokio::time::sleep(std::time::Duration::from_millis(left + 100)).await;
    }
    let day_end = clock.day_end_ms(freeway::clock::epoch_ms());
    for _ in 0..limits.per_window.expect("a limit") {
        let slot = pacer.admit(instance, &limits, day_end, 0).await;
        assert_eq!(slot.expect("the limiter"), Slot::Now);
    }
}

fn pool<'a>(pools: &'a Value, name: &str) -> &'a Value {
    pools["pools"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("{name} in {pools}"))
}

#[tokio::test]
async fn pools_show_each_instances_waiting_runs_their_tenants_and_this_windows_shares() {
    let Some(s) = Server::with_catalog(catalog()).await else {
        return;
    };
    let (status, pools) = s.get_json("/v1/pools").await;
    assert_eq!(status, 200, "{pools}");
    let free = pool(&pools, "openrouter-free");
    assert_eq!(
        (&free["use"]["waiting"], &free["use"]["tenants_waiting"]),
        (&json!(0), &json!(0)),
        "{free}"
    );
    assert_eq!(free["use"]["shares"], json!([]));
    assert_eq!(free["instances"], json!([]));

    // The window is full: three runs of tenant a and one of b wait their turn.
    let shared = "openrouter-free";
    fill(&s, shared).await;
    for (run, tenant) in [("a-1", "a"), ("a-2", "a"), ("b-1", "b"), ("a-3", "a")] {
        let joined = join(&s, shared, run, tenant).await;
        assert!(matches!(joined, Joined::Queued { .. }), "{run}: {joined:?}");
    }
    let (_, pools) = s.get_json("/v1/pools").await;
    let used = &pool(&pools, shared)["use"];
    assert_eq!(
        (&used["waiting"], &used["tenants_waiting"], &used["shares"]),
        (&json!(4), &json!(2), &json!([])),
        "{used}"
    );

    // A slot given back goes to the line's first run: its tenant's share of this window.
    let catalog = s.enqueuer.catalog();
    let (limits, clock) = catalog.instance(shared).expect("the pool");
    let day_end = clock.day_end_ms(freeway::clock::epoch_ms());
    let pacer = s.enqueuer.pacer();
    pacer.release(shared, &limits, day_end, 0, 0).await.unwrap();
    let dispatched = pacer.dispatch(shared, &limits, day_end, 10).await.unwrap();
    assert_eq!(dispatched.granted.len(), 1, "{dispatched:?}");
    let first = dispatched.granted[0].clone();
    let tenant = first.split('-').next().unwrap_or_default().to_string();
    let (_, pools) = s.get_json("/v1/pools").await;
    let used = &pool(&pools, shared)["use"];
    assert_eq!(used["waiting"], 3, "{used}");
    assert_eq!(
        used["tenants_waiting"],
        if tenant == "a" { 2 } else { 1 },
        "{used}"
    );
    assert_eq!(
        used["shares"],
        json!([{ "tenant": tenant, "slots": 1 }]),
        "{used}"
    );

    // A user's key of a per-key pool is an instance of its own, listed while runs wait for it.
    let own = "groq-llama@conn_1";
    fill(&s, own).await;
    for run in ["c-1", "c-2"] {
        let joined = join(&s, own, run, "c").await;
        assert!(matches!(joined, Joined::Queued { .. }), "{run}: {joined:?}");
    }
    let (_, pools) = s.get_json("/v1/pools").await;
    let groq = pool(&pools, "groq-llama");
    let instances = groq["instances"].as_array().expect("instances");
    assert_eq!(instances.len(), 1, "{groq}");
    assert_eq!(instances[0]["instance"], own);
    assert_eq!(
        (&instances[0]["waiting"], &instances[0]["tenants_waiting"]),
        (&json!(2), &json!(1)),
        "{groq}"
    );
    assert_eq!(
        groq["use"]["instance"], "groq-llama@platform",
        "the platform's instance stays in `use`"
    );
    assert_eq!(groq["use"]["waiting"], 0);
    assert_eq!(pool(&pools, shared)["instances"], json!([]));
}
