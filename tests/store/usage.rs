//! (v3) What tenants call and spend, from the attempt log (docs/design.md §4.8): by tenant, day
//! and route within the days a caller bounds, and the tenants of recent runs with their newest
//! run's tier. Costs here are sums of binary fractions, exact in any order of addition.

use crate::{fresh, on_every_store, record, unique};
use freeway::canary::CanaryRecord;
use freeway::run::{AttemptRecord, RunRecord};
use freeway::store::{RouteDay, Store, StoreError, TenantSeen};
use sqlx::Connection;

/// The first day's start: a fixed moment, so days are the test's and not the clock's.
const D0: u64 = 1_700_000_000_000;
const DAY: u64 = 86_400_000;
const R1: &str = "platform:generic/vendor/paid";
const R2: &str = "platform:openrouter/vendor/m:free";

fn bounds() -> Vec<u64> {
    vec![D0, D0 + DAY, D0 + 2 * DAY, D0 + 3 * DAY]
}

fn run_of(tenant: &str, tier: &str, created_ms: u64) -> RunRecord {
    let mut run = record(&unique("run"), &unique("conv"));
    run.tenant = tenant.into();
    run.tier = tier.into();
    run.created_ms = created_ms;
    run.updated_ms = created_ms;
    run
}

fn attempt(run: &RunRecord, n: u32, route: &str, t_ms: u64, cost_usd: f64) -> AttemptRecord {
    AttemptRecord {
        cost_usd,
        ..AttemptRecord::succeeded(&run.run_id, n, 1, route.into(), t_ms)
    }
}

fn row(tenant: &str, day: u64, route: &str, calls: u64, cost_usd: f64) -> RouteDay {
    RouteDay {
        tenant: tenant.into(),
        day_start_ms: D0 + day * DAY,
        route: route.into(),
        calls,
        cost_usd,
    }
}

/// Two runs of `org_a`, one of `org_b`, one of a user who named no tenant, and a canary.
async fn seed(s: &dyn Store) {
    let a1 = run_of("org_a", "default", D0);
    let a2 = run_of("org_a", "pro", D0 + 1);
    let b1 = run_of("org_b", "default", D0 + 2);
    let user = run_of("u1", "default", D0 + 3);
    for run in [&a1, &a2, &b1, &user] {
        s.create_run(run).await.unwrap();
    }
    for a in [
        attempt(&a1, 1, R1, D0 - 1, 8.0), // before the first day
        attempt(&a1, 2, R1, D0 + 10, 0.25),
        attempt(&a1, 3, R1, D0 + DAY + 5, 0.5),
        attempt(&a1, 4, R2, D0 + DAY + 6, 0.0),
        attempt(&a1, 5, R1, D0 + 2 * DAY, 1.0), // the third day's first moment
        attempt(&a1, 6, R1, D0 + 3 * DAY, 16.0), // the last day's end: after it
        attempt(&a2, 1, R1, D0 + DAY + 7, 0.125),
        attempt(&b1, 1, R1, D0 + DAY + 8, 2.0),
        attempt(&user, 1, R2, D0 + DAY + 9, 0.0),
    ] {
        s.record_attempt(&a).await.unwrap();
    }
    // A lost attempt later recorded with its outcome counts once.
    let lost = AttemptRecord::lost(&a2.run_id, 2, 1, R1.into(), D0 + 2 * DAY + 1);
    s.record_attempt(&lost).await.unwrap();
    s.record_attempt(&attempt(&a2, 2, R1, D0 + 2 * DAY + 1, 0.75))
        .await
        .unwrap();
    // Canaries are no tenant's.
    let canary = CanaryRecord {
        provider: "generic".into(),
        attempt: AttemptRecord {
            run_id: CanaryRecord::run_id("generic", D0 + DAY),
            cost_usd: 0.5,
            ..AttemptRecord::succeeded("x", 1, 1, R1.into(), D0 + DAY)
        },
    };
    s.record_canary(&canary).await.unwrap();
}

#[tokio::test]
async fn a_tenants_calls_and_cost_are_summed_by_day_and_route_within_the_bounds() {
    on_every_store("usage", check_usage).await;
}

async fn check_usage(s: &dyn Store, label: &str) {
    seed(s).await;
    let a = vec!["org_a".to_string()];
    assert_eq!(
        s.usage_by_day(&a, &bounds()).await.unwrap(),
        [
            row("org_a", 0, R1, 1, 0.25),
            row("org_a", 1, R1, 2, 0.625),
            row("org_a", 1, R2, 1, 0.0),
            row("org_a", 2, R1, 2, 1.75),
        ],
        "{label}"
    );
    // Several tenants at once, each its own; a user who named no tenant is one.
    let three = ["u1", "org_b", "org_a"].map(String::from);
    let today = [D0 + DAY, D0 + 2 * DAY];
    assert_eq!(
        s.usage_by_day(&three, &today).await.unwrap(),
        [
            row("org_a", 1, R1, 2, 0.625),
            row("org_a", 1, R2, 1, 0.0),
            row("org_b", 1, R1, 1, 2.0),
            row("u1", 1, R2, 1, 0.0),
        ],
        "{label}"
    );
    let nobody = ["org_c".to_string()];
    assert_eq!(
        s.usage_by_day(&nobody, &bounds()).await.unwrap(),
        [],
        "{label}"
    );
    assert_eq!(s.usage_by_day(&[], &bounds()).await.unwrap(), [], "{label}");
    assert_eq!(s.usage_by_day(&a, &[D0]).await.unwrap(), [], "{label}");
    for bad in [vec![D0 + DAY, D0], vec![D0, D0]] {
        assert!(
            matches!(s.usage_by_day(&a, &bad).await, Err(StoreError::Invalid(_))),
            "{label}: {bad:?}"
        );
    }
    let many = vec!["t".to_string(); freeway::store::MAX_USAGE_TENANTS + 1];
    assert!(
        matches!(
            s.usage_by_day(&many, &bounds()).await,
            Err(StoreError::Invalid(_))
        ),
        "{label}"
    );
    // A tenant or route name is a value, never SQL.
    let odd = ["org_a') OR 1=1 --".to_string()];
    assert_eq!(
        s.usage_by_day(&odd, &bounds()).await.unwrap(),
        [],
        "{label}"
    );
}

#[tokio::test]
async fn recent_tenants_come_newest_first_with_their_newest_runs_tier() {
    on_every_store("tenants", check_recent_tenants).await;
}

async fn check_recent_tenants(s: &dyn Store, label: &str) {
    seed(s).await;
    let seen = |tenant: &str, tier: &str, runs: u64, last_run_ms: u64| TenantSeen {
        tenant: tenant.into(),
        tier: tier.into(),
        runs,
        last_run_ms,
    };
    assert_eq!(
        s.recent_tenants(D0, 100).await.unwrap(),
        [
            seen("u1", "default", 1, D0 + 3),
            seen("org_b", "default", 1, D0 + 2),
            seen("org_a", "pro", 2, D0 + 1),
        ],
        "{label}"
    );
    // Runs before `since` do not count; the limit keeps the newest.
    assert_eq!(
        s.recent_tenants(D0 + 1, 100).await.unwrap()[2],
        seen("org_a", "pro", 1, D0 + 1),
        "{label}"
    );
    assert_eq!(
        s.recent_tenants(D0, 2).await.unwrap(),
        [
            seen("u1", "default", 1, D0 + 3),
            seen("org_b", "default", 1, D0 + 2)
        ],
        "{label}"
    );
    assert_eq!(s.recent_tenants(D0 + 4, 100).await.unwrap(), [], "{label}");
}

/// A run stored before tenants (NULL tenant and tier) is its user's, in `default`.
#[tokio::test]
async fn a_run_from_before_tenants_counts_for_its_user_in_the_default_tier() {
    for db in fresh("usage-legacy").await {
        let s = &db.store;
        // Stored as org_x's in `pro`, then made a row from before tenants.
        let legacy = run_of("org_x", "pro", D0);
        s.create_run(&legacy).await.unwrap();
        s.record_attempt(&attempt(&legacy, 1, R1, D0 + 1, 0.5))
            .await
            .unwrap();
        let nulls = "UPDATE runs SET tenant = NULL, tier = NULL WHERE run_id = $1";
        match db.label {
            "postgres" => {
                let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
                let q = sqlx::query(nulls).bind(&legacy.run_id);
                q.execute(&mut conn).await.unwrap();
            }
            _ => {
                let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                let q = sqlx::query(nulls).bind(&legacy.run_id);
                q.execute(&mut conn).await.unwrap();
            }
        }
        let user = ["u1".to_string()];
        assert_eq!(
            s.usage_by_day(&user, &bounds()).await.unwrap(),
            [row("u1", 0, R1, 1, 0.5)],
            "{}: the run's user is u1",
            db.label
        );
        assert_eq!(
            s.recent_tenants(D0, 10).await.unwrap(),
            [TenantSeen {
                tenant: "u1".into(),
                tier: "default".into(),
                runs: 1,
                last_run_ms: D0
            }],
            "{}",
            db.label
        );
        db.finish().await;
    }
}
