//! The spend scenario (docs/design.md §4.8): 20 tenants of one tier capped at $0.10 a day race
//! for a priced model on K replicas. Each tenant enqueues paid-only runs (`on_rest: refuse`:
//! capped, they end `spend_cap_reached`) and runs whose chain falls back to a free model
//! (`on_rest: queue`: capped, they go free, waiting for the free pool's slots). What freeway
//! promises: no tenant's recorded spend passes its cap by more than one call's cost, and no
//! call is made once a tenant's spend would pass it.

use crate::args::{Args, BoxError};
use crate::cluster::{Cluster, Sim, with_cluster};
use crate::quota::settle;
use freeway::catalog::Catalog;
use freeway::job::{OnRest, RunJob, RunRequest};
use freeway::route::RouteSpec;
use freeway::run::{Code, RunRecord, RunStatus};
use freeway::store::Store;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

const PAID: &str = "openai/gpt-4o-mini";
const FREE: &str = "meta-llama/llama-3.3-70b-instruct:free";
const TENANTS: usize = 20;
const CAP_USD: f64 = 0.10;
/// USD per million tokens, the simulator's and the configuration's alike: a call of ~9 prompt
/// and ~4 answer tokens costs about $0.00125, and is held at about $0.0018 (its 8-token cap): a
/// tenant's cap takes some 80 calls.
const PRICE: (f64, f64) = (50.0, 200.0);
const MAX_TOKENS: u32 = 8;

pub(crate) async fn run(args: &Args, worker: &Path) -> Result<(), BoxError> {
    let sim = Sim::start(sim::SimConfig {
        rpm: args.rpm,
        rpd: args.rpd,
        window_s: args.window_s,
        latency_ms: 0,
        ..Default::default()
    })?;
    let price = sim::Price {
        input: PRICE.0,
        output: PRICE.1,
    };
    sim.handle().set_prices(&[sim::ModelPrice {
        model: PAID.to_string(),
        price,
    }])?;
    with_cluster(sim, args, "spend", async |sim, cluster| {
        scenario(args, worker, sim, cluster).await
    })
    .await
}

async fn scenario(
    args: &Args,
    worker: &Path,
    sim: &Sim,
    cluster: &mut Cluster,
) -> Result<(), BoxError> {
    let per_tenant = (args.runs / TENANTS as u64).max(2);
    println!(
        "spend: {} worker processes × concurrency {}, {TENANTS} tenants × {per_tenant} runs (half \
         [{PAID}] on_rest refuse, half [{PAID}, {FREE}] on_rest queue), cap ${CAP_USD} a tenant a \
         day; price ${}/${} per million tokens; free pool {} per {} s; worker {}",
        args.replicas,
        args.concurrency,
        PRICE.0,
        PRICE.1,
        args.rpm,
        args.window_s,
        worker.display()
    );
    let config = cluster.dir.join("freeway.toml");
    std::fs::write(
        &config,
        format!(
            "[tiers.default]\nspend_usd_per_day = {CAP_USD}\n\n[prices]\n\"{PAID}\" = \
             {{ input = {}, output = {} }}\n\n[pools.openrouter-free]\nrpm = {}\nwindow_s = {}\n",
            PRICE.0, PRICE.1, args.rpm, args.window_s
        ),
    )?;
    let config = config.to_string_lossy().into_owned();
    cluster.spawn_fleet(worker, args, sim, &[("FREEWAY_CONFIG", &config)])?;
    let started = Instant::now();
    let catalog = Catalog::builtin();
    let mut jobs = Vec::new();
    for n in 0..per_tenant {
        for t in 0..TENANTS {
            let fallback = n % 2 == 1;
            jobs.push(RunJob::new(
                request(t, fallback, &catalog),
                freeway::clock::epoch_ms(),
            ));
        }
    }
    cluster.queue.push(&jobs).await?;
    let records = settle(args, cluster, &jobs).await?;
    let total_s = started.elapsed().as_secs_f64();
    report(cluster, &jobs, &records, total_s).await
}

fn request(tenant: usize, fallback: bool, catalog: &Catalog) -> RunRequest {
    let models: &[&str] = if fallback { &[PAID, FREE] } else { &[PAID] };
    RunRequest {
        deadline_s: Some(3_600),
        on_rest: Some(if fallback {
            OnRest::Queue
        } else {
            OnRest::Refuse
        }),
        max_tokens: Some(MAX_TOKENS),
        tenant: Some(format!("tenant-{tenant:02}")),
        ..RunRequest::new(
            format!("u{tenant}"),
            "what does it cost",
            models
                .iter()
                .map(|m| RouteSpec::parse_cli(m, catalog))
                .collect(),
        )
    }
}

/// Each tenant's recorded spend against its cap, the calls it paid for, and how its runs ended.
async fn report(
    cluster: &Cluster,
    jobs: &[RunJob],
    records: &HashMap<String, RunRecord>,
    total_s: f64,
) -> Result<(), BoxError> {
    #[derive(Default)]
    struct Tenant {
        spend: f64,
        paid_calls: u64,
        largest_call: f64,
    }
    let mut tenants: BTreeMap<String, Tenant> = BTreeMap::new();
    let mut ends: BTreeMap<String, u64> = BTreeMap::new();
    for job in jobs {
        let rec = &records[&job.run_id];
        let tenant = tenants
            .entry(job.request.tenant_id().to_string())
            .or_default();
        for attempt in cluster.store.attempts(&job.run_id).await? {
            if attempt.cost_usd > 0.0 {
                tenant.spend += attempt.cost_usd;
                tenant.paid_calls += 1;
                tenant.largest_call = tenant.largest_call.max(attempt.cost_usd);
            }
        }
        let fallback = job.request.routes.len() > 1;
        let end = match (rec.status, rec.code, rec.state.route_index) {
            (RunStatus::Succeeded, _, Some(0)) => "succeeded on the paid route",
            (RunStatus::Succeeded, _, _) => "succeeded on the free route",
            (_, Some(Code::SpendCapReached), _) => "spend_cap_reached",
            _ => "other",
        };
        let kind = if fallback {
            "paid→free, queue"
        } else {
            "paid only, refuse"
        };
        *ends.entry(format!("{kind}: {end}")).or_default() += 1;
    }
    let worst = tenants
        .values()
        .map(|t| t.spend - CAP_USD)
        .fold(f64::MIN, f64::max);
    let largest = tenants.values().map(|t| t.largest_call).fold(0.0, f64::max);
    let over = tenants
        .values()
        .filter(|t| t.spend > CAP_USD + t.largest_call)
        .count();
    println!("  runs             {} ended in {total_s:.1} s", jobs.len());
    for (end, n) in &ends {
        println!("    {end:<48} {n}");
    }
    let spends: Vec<String> = tenants
        .values()
        .map(|t| format!("{:.4}", t.spend))
        .collect();
    println!("  spend a tenant   {} (cap {CAP_USD})", spends.join(" "));
    let calls: Vec<String> = tenants.values().map(|t| t.paid_calls.to_string()).collect();
    println!("  paid calls       {}", calls.join(" "));
    println!(
        "  overrun          worst tenant {:+.5} USD against the cap; largest call {:.5}; \
         tenants past cap + one call: {over}",
        worst, largest
    );
    Ok(())
}
