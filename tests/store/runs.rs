//! A run's record and what hangs off it: created and saved, the conversation it opens, its
//! attempts and approvals, and the board's list and counts.

use crate::{call, fresh, on_every_store, record, unique};
use freeway::budget::{Counters, Kind};
use freeway::chat::{Message, Usage};
use freeway::classify::Verdict;
use freeway::clock::epoch_ms;
use freeway::route::RouteSpec;
use freeway::run::{ApprovalRecord, AttemptRecord, Code, Decided, Decision, RunState, RunStatus};
use freeway::store::{Attached, Created, RunFilter, RunPage, Store};
use sqlx::Connection;

#[tokio::test]
async fn create_run_is_insert_if_absent_and_keeps_the_stored_progress() {
    for db in fresh("create").await {
        let s = &db.store;
        let mut first = record(&unique("run"), &unique("conv"));
        s.create_run(&first).await.unwrap();
        assert_eq!(
            s.run(&first.run_id).await.unwrap().as_ref(),
            Some(&first),
            "{}",
            db.label
        );
        first.status = RunStatus::Running;
        first.state.counters = Counters {
            calls: 2,
            step1_attempts: 2,
            retried: true,
            steps: 1,
        };
        first.state.input_applied = true;
        s.save_run(&first).await.unwrap();
        // A second create (an enqueue retried) leaves the first one's progress alone.
        let mut again = record(&first.run_id, &first.conversation_id);
        again.created_ms += 5_000;
        s.create_run(&again).await.unwrap();
        assert_eq!(
            s.run(&first.run_id).await.unwrap(),
            Some(first.clone()),
            "{}",
            db.label
        );
        assert_eq!(s.run("run_missing").await.unwrap(), None, "{}", db.label);
        db.finish().await;
    }
}

/// One key, one run (docs/design.md §4.3): runs created at once under one user's idempotency key,
/// through two stores on one database (two producers), leave one run; every other create
/// answers that run and writes nothing. Another user's same key is theirs, and a run discarded
/// because it could not be enqueued frees its key.
#[tokio::test]
async fn one_idempotency_key_records_one_run_however_many_creates_race() {
    for db in fresh("onekey").await {
        let label = db.label;
        let other = freeway::store::SqlStore::open(&db.url)
            .await
            .expect("a second store");
        let keyed = |user: &str| {
            let (mut job, _) =
                crate::engine::job(&unique("conv"), Some("hi"), false, &["vendor/m"]);
            job.request.user_id = user.to_string();
            job.request.idempotency_key = Some("double-click".into());
            job
        };
        let jobs: Vec<freeway::job::RunJob> = (0..40).map(|_| keyed("u1")).collect();
        let now = epoch_ms();
        let created = futures_util::future::join_all(jobs.iter().enumerate().map(|(i, job)| {
            let store: &dyn Store = if i % 2 == 0 { &db.store } else { &other };
            store.create_queued(job, now)
        }))
        .await;
        let created: Vec<Created> = created.into_iter().map(Result::unwrap).collect();
        let new: Vec<&str> = jobs
            .iter()
            .zip(&created)
            .filter(|(_, c)| **c == Created::New)
            .map(|(job, _)| job.run_id.as_str())
            .collect();
        assert_eq!(new.len(), 1, "{label}: {created:?}");
        let holder = new[0].to_string();
        for (job, c) in jobs.iter().zip(&created) {
            if job.run_id != holder {
                assert_eq!(*c, Created::Existing(holder.clone()), "{label}");
                assert_eq!(db.store.run(&job.run_id).await.unwrap(), None, "{label}");
                assert_eq!(db.store.job(&job.run_id).await.unwrap(), None, "{label}");
            }
        }
        let s = &db.store;
        assert_eq!(
            s.keyed_run("u1", "double-click").await.unwrap(),
            Some(holder.clone())
        );
        assert_eq!(
            s.keyed_run("u2", "double-click").await.unwrap(),
            None,
            "{label}"
        );
        let theirs = keyed("u2");
        assert_eq!(
            s.create_queued(&theirs, now).await.unwrap(),
            Created::New,
            "{label}"
        );
        s.discard_queued(&holder).await.unwrap();
        assert_eq!(
            s.keyed_run("u1", "double-click").await.unwrap(),
            None,
            "{label}"
        );
        let resent = keyed("u1");
        assert_eq!(
            s.create_queued(&resent, now).await.unwrap(),
            Created::New,
            "{label}"
        );
        other.close().await;
        db.finish().await;
    }
}

/// A retry reads a settled run's job from the store once Redis has let go of its copy.
#[tokio::test]
async fn a_run_enqueued_with_its_job_gives_that_job_back() {
    on_every_store("job", async |s: &dyn Store, label: &str| {
        let (job, _) = crate::engine::job(&unique("conv"), Some("hi"), false, &["vendor/m"]);
        s.create_queued(&job, epoch_ms()).await.unwrap();
        let kept = s.job(&job.run_id).await.unwrap().expect("the job is kept");
        let kept: freeway::job::RunJob = serde_json::from_str(&kept).unwrap();
        assert_eq!(kept.run_id, job.run_id, "{label}");
        assert_eq!(kept.request, job.request, "{label}");
        assert_eq!(s.job(&unique("run")).await.unwrap(), None, "{label}");
        let worker_made = record(&unique("run"), &unique("conv"));
        s.create_run(&worker_made).await.unwrap();
        assert_eq!(
            s.job(&worker_made.run_id).await.unwrap(),
            None,
            "{label}: a run stored by a worker keeps no job"
        );
    })
    .await;
}

#[tokio::test]
async fn a_conversation_belongs_to_the_user_whose_run_opened_it() {
    on_every_store("owner", check_conversation_owner).await;
}

async fn check_conversation_owner(s: &dyn Store, label: &str) {
    let conv = unique("conv");
    assert_eq!(s.conversation_owner(&conv).await.unwrap(), None, "{label}");
    s.create_run(&record(&unique("run"), &conv)).await.unwrap();
    let mut other = record(&unique("run"), &conv);
    other.user_id = "u2".into();
    s.create_run(&other).await.unwrap();
    assert_eq!(
        s.conversation_owner(&conv).await.unwrap().as_deref(),
        Some("u1"),
        "{label}: the first run's user keeps it"
    );
    let pushed = unique("conv");
    s.append_message(&pushed, "run_pushed", "input", &Message::user("hi"))
        .await
        .unwrap();
    assert_eq!(
        s.conversation_owner(&pushed).await.unwrap(),
        None,
        "{label}: a conversation opened by a worker alone has no owner"
    );
}

#[tokio::test]
async fn save_run_overwrites_every_mutable_field_and_counters_survive_a_snooze() {
    for db in fresh("save").await {
        let s = &db.store;
        let mut r = record(&unique("run"), &unique("conv"));
        r.kind = Kind::Research;
        r.parent_run_id = Some("run_parent".into());
        r.idempotency_key = Some("idem-1".into());
        r.routes.push(RouteSpec {
            model: "m2".into(),
            connection: Some("conn_1".into()),
            provider: Some("groq".into()),
        });
        s.create_run(&r).await.unwrap();
        r.status = RunStatus::Delayed;
        r.state = RunState {
            counters: Counters {
                calls: 3,
                step1_attempts: 3,
                retried: true,
                steps: 2,
            },
            route_index: Some(1),
            input_applied: true,
            ambiguous_stop: true,
            emitted: true,
            snoozes: 4,
        };
        r.output = "partial answer — ünïcode ✓".into();
        r.incomplete = true;
        r.usage = Usage {
            prompt_tokens: 11,
            completion_tokens: 22,
            total_tokens: 33,
        };
        r.summary = Some("a summary".into());
        r.updated_ms += 1;
        s.save_run(&r).await.unwrap();
        assert_eq!(
            s.run(&r.run_id).await.unwrap().as_ref(),
            Some(&r),
            "{}: a snoozed run keeps its counters",
            db.label
        );
        r.status = RunStatus::Failed;
        r.code = Some(Code::RateLimited);
        r.pending_tool_call = Some(call("call_1"));
        r.summary = None;
        s.save_run(&r).await.unwrap();
        assert_eq!(
            s.run(&r.run_id).await.unwrap().as_ref(),
            Some(&r),
            "{}",
            db.label
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn attempts_round_trip_every_field() {
    for db in fresh("attempts").await {
        let s = &db.store;
        let run_id = unique("run");
        let full = AttemptRecord {
            run_id: run_id.clone(),
            n: 1,
            step: 1,
            route: "platform:openrouter/vendor/m:free".into(),
            http_status: Some(429),
            error: Some("HTTP 429: Rate limit exceeded: free-models-per-min".into()),
            verdict: Some(Verdict::Account),
            retry_hint_ms: Some(41_000),
            ratelimit_remaining: Some(0),
            provider_name: Some("Chutes".into()),
            latency_ms: 123,
            t_ms: epoch_ms(),
            cost_usd: 0.000_123_456_789,
        };
        let bare = AttemptRecord {
            n: 2,
            http_status: None,
            error: None,
            verdict: None,
            retry_hint_ms: None,
            ratelimit_remaining: None,
            provider_name: None,
            ..full.clone()
        };
        s.record_attempt(&bare).await.unwrap();
        // Counted as lost, then how the call ended: the later record replaces the earlier.
        let lost = AttemptRecord::lost(&run_id, 1, 1, full.route.clone(), full.t_ms);
        s.record_attempt(&lost).await.unwrap();
        assert!(
            s.attempts(&run_id).await.unwrap()[0].is_lost(),
            "{}",
            db.label
        );
        s.record_attempt(&full).await.unwrap();
        s.record_attempt(&full).await.unwrap();
        assert_eq!(
            s.attempts(&run_id).await.unwrap(),
            vec![full.clone(), bare.clone()],
            "{}",
            db.label
        );
        for verdict in [
            Verdict::Route,
            Verdict::Provider,
            Verdict::Ambiguous,
            Verdict::Billing,
            Verdict::Auth,
            Verdict::Client,
            Verdict::Server,
        ] {
            let a = AttemptRecord {
                n: 3,
                verdict: Some(verdict),
                run_id: unique("run"),
                ..full.clone()
            };
            s.record_attempt(&a).await.unwrap();
            assert_eq!(
                s.attempts(&a.run_id).await.unwrap(),
                vec![a.clone()],
                "{}",
                db.label
            );
        }
        db.finish().await;
    }
}

#[tokio::test]
async fn a_paused_run_records_its_approval() {
    on_every_store("approval", check_approvals).await;
}

/// A run saved while it awaits a tool call records the call once; its answer rides on a later
/// save, and the first answer stays.
async fn check_approvals(s: &dyn Store, label: &str) {
    let mut r = record(&unique("run"), &unique("conv"));
    s.create_run(&r).await.unwrap();
    r.status = RunStatus::AwaitingApproval;
    r.pending_tool_call = Some(call("call_ask"));
    s.save_run(&r).await.unwrap();
    s.save_run(&r).await.unwrap();
    assert_eq!(s.run(&r.run_id).await.unwrap(), Some(r.clone()));
    let waiting = ApprovalRecord {
        run_id: r.run_id.clone(),
        tool_call: call("call_ask"),
        created_ms: r.updated_ms,
        decided: None,
    };
    assert_eq!(
        s.approvals(&r.run_id).await.unwrap(),
        vec![waiting.clone()],
        "{label}: saved twice, recorded once"
    );

    let decided = Decided {
        decision: Decision::Deny,
        result: "denied by the user".into(),
        continuation_run_id: "run_continuation".into(),
        decided_ms: r.updated_ms + 5,
    };
    r.status = RunStatus::Succeeded;
    r.pending_tool_call = None;
    let answer = Attached::Decision {
        tool_call_id: "call_ask".into(),
        decided: decided.clone(),
    };
    s.save_run_with(&r, &[answer]).await.unwrap();
    let second = Decided {
        decision: Decision::Approve,
        ..decided.clone()
    };
    s.record_decision(&r.run_id, "call_ask", &second)
        .await
        .unwrap();
    s.record_decision(&r.run_id, "call_never_asked", &second)
        .await
        .unwrap();
    assert_eq!(
        s.approvals(&r.run_id).await.unwrap(),
        vec![ApprovalRecord {
            decided: Some(decided),
            ..waiting
        }],
        "{label}: the first answer stays, an unknown call records nothing"
    );
    assert_eq!(s.run(&r.run_id).await.unwrap(), Some(r));
}

/// The board's list and the metrics' counts, with the same answers from every store.
async fn check_recent_runs_and_counts(s: &dyn Store, label: &str) {
    assert!(s.count_by_status().await.unwrap().is_empty(), "{label}");
    let conv = unique("conv");
    let base = epoch_ms();
    let mut specs = vec![
        ("run_a", "u1", 1, RunStatus::Succeeded, None),
        ("run_b", "u2", 2, RunStatus::Failed, Some(Code::RateLimited)),
        ("run_c", "u1", 3, RunStatus::Delayed, None),
        ("run_d", "u1", 3, RunStatus::Failed, Some(Code::RateLimited)),
        (
            "run_e",
            "u2",
            5,
            RunStatus::Refused,
            Some(Code::AccountResting),
        ),
    ];
    specs.reverse();
    for (id, user, at, status, code) in &specs {
        let mut r = record(id, &conv);
        r.user_id = (*user).into();
        r.created_ms = base + at;
        r.status = *status;
        r.code = *code;
        if *id == "run_b" {
            r.output = "Hello%World".into();
        }
        if *id == "run_a" {
            r.routes[0].model = "other/model".into();
        }
        s.save_run(&r).await.unwrap();
    }
    let ids = |page: RunPage| page.runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    let all = RunFilter::default();
    let list =
        |filter: RunFilter, limit| async move { s.list_runs(&filter, None, limit).await.unwrap() };
    assert_eq!(
        ids(list(all.clone(), 10).await),
        ["run_e", "run_d", "run_c", "run_b", "run_a"],
        "{label}: newest first, ties by id"
    );
    // Pages of two, each starting after the last one shown, until none follows.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = s.list_runs(&all, after.as_ref(), 2).await.unwrap();
        assert!(page.runs.len() <= 2);
        after = page.next.clone();
        paged.extend(ids(page));
        if after.is_none() {
            break;
        }
    }
    assert_eq!(
        paged,
        ["run_e", "run_d", "run_c", "run_b", "run_a"],
        "{label}: paged"
    );
    let of_user = |u: &str| RunFilter {
        user_id: Some(u.into()),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(list(of_user("u1"), 10).await),
        ["run_d", "run_c", "run_a"],
        "{label}: one user's runs only"
    );
    assert!(list(of_user("nobody"), 10).await.runs.is_empty());
    let failed = RunFilter {
        status: Some(RunStatus::Failed),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(list(failed.clone(), 10).await),
        ["run_d", "run_b"],
        "{label}"
    );
    let code = RunFilter {
        code: Some(Code::AccountResting),
        ..RunFilter::default()
    };
    let full = list(code, 10).await;
    assert_eq!(full.runs[0].run_id, "run_e", "{label}");
    assert_eq!(
        full.runs[0].code,
        Some(Code::AccountResting),
        "{label}: whole records"
    );
    let by_id = RunFilter {
        q: Some("RUN_C".into()),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(list(by_id, 10).await),
        ["run_c"],
        "{label}: an id prefix, either case"
    );
    let by_text = RunFilter {
        q: Some("hello%".into()),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(list(by_text, 10).await),
        ["run_b"],
        "{label}: output text, read literally"
    );
    let by_model = |m: &str| RunFilter {
        model: Some(m.into()),
        ..RunFilter::default()
    };
    assert_eq!(
        ids(list(by_model("other/model"), 10).await),
        ["run_a"],
        "{label}"
    );
    assert!(
        list(by_model("other/"), 10).await.runs.is_empty(),
        "{label}: whole model ids"
    );
    let counted = s.count_runs(&failed).await.unwrap();
    assert_eq!(
        counted,
        [
            (RunStatus::Delayed, 1),
            (RunStatus::Succeeded, 1),
            (RunStatus::Failed, 2),
            (RunStatus::Refused, 1),
        ],
        "{label}: counts take every status of the rest of the filter"
    );
    let counted = s.count_runs(&of_user("u2")).await.unwrap();
    assert_eq!(
        counted,
        [(RunStatus::Failed, 1), (RunStatus::Refused, 1)],
        "{label}"
    );
    let counts: Vec<(RunStatus, Option<Code>, u64)> = s
        .count_by_status()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.status, c.code, c.runs))
        .collect();
    assert_eq!(
        counts,
        [
            (RunStatus::Delayed, None, 1),
            (RunStatus::Failed, Some(Code::RateLimited), 2),
            (RunStatus::Refused, Some(Code::AccountResting), 1),
            (RunStatus::Succeeded, None, 1),
        ],
        "{label}"
    );
}

#[tokio::test]
async fn runs_are_listed_newest_first_filtered_paged_and_counted_by_status() {
    on_every_store("recent", check_recent_runs_and_counts).await;
}

/// (v3) A run's tenant, tier, priority and cap are stored as the enqueue resolved them; its cost
/// follows each save. A row from before tenants (NULLs) reads as its user's, in `default`.
#[tokio::test]
async fn tenant_tier_priority_cap_and_cost_round_trip() {
    for db in fresh("tenants").await {
        let s = &db.store;
        let mut run = record(&unique("run"), &unique("conv"));
        run.tenant = "org_acme".into();
        run.tier = "pro".into();
        run.priority = freeway::job::Priority::Batch;
        run.max_usd = Some(0.25);
        s.create_run(&run).await.unwrap();
        assert_eq!(
            s.run(&run.run_id).await.unwrap().as_ref(),
            Some(&run),
            "{}",
            db.label
        );
        run.cost_usd = 0.000_123_456_789;
        s.save_run(&run).await.unwrap();
        let stored = s.run(&run.run_id).await.unwrap().expect("stored");
        assert_eq!(
            stored.cost_usd, 0.000_123_456_789,
            "{}: 8-byte floats",
            db.label
        );

        let legacy = record(&unique("run"), &unique("conv"));
        s.create_run(&legacy).await.unwrap();
        let nulls = "UPDATE runs SET tenant = NULL, tier = NULL, priority = NULL WHERE run_id = $1";
        match db.label {
            "postgres" => {
                let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
                sqlx::query(nulls)
                    .bind(&legacy.run_id)
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            _ => {
                let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                sqlx::query(nulls)
                    .bind(&legacy.run_id)
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
        }
        let read = s.run(&legacy.run_id).await.unwrap().expect("stored");
        assert_eq!(
            (read.tenant.as_str(), read.tier.as_str(), read.priority),
            ("u1", "default", freeway::job::Priority::Interactive),
            "{}",
            db.label
        );

        let of_tenant = |t: &str| RunFilter {
            tenant: Some(t.into()),
            ..RunFilter::default()
        };
        let ids = |page: RunPage| page.runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
        let page = s.list_runs(&of_tenant("org_acme"), None, 10).await.unwrap();
        assert_eq!(ids(page), [run.run_id.as_str()], "{}", db.label);
        let page = s.list_runs(&of_tenant("u1"), None, 10).await.unwrap();
        assert_eq!(
            ids(page),
            [legacy.run_id.as_str()],
            "{}: its user's",
            db.label
        );
        assert_eq!(
            s.count_runs(&of_tenant("org_acme")).await.unwrap(),
            [(RunStatus::Queued, 1)],
            "{}",
            db.label
        );
        db.finish().await;
    }
}

/// The runs that retry a run are found from it, oldest first, and only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_names_the_runs_that_retry_it() {
    let memory = freeway::store::MemoryStore::default();
    let dbs = fresh("retried_as").await;
    let mut stores: Vec<(String, &dyn Store)> = vec![("memory".into(), &memory)];
    for db in &dbs {
        stores.push((db.label.to_string(), &db.store));
    }
    for (label, store) in stores {
        let original = record(&unique("run"), &unique("conv"));
        store.create_run(&original).await.unwrap();
        let mut retries = Vec::new();
        for i in 0..2 {
            let mut retry = record(&unique("run"), &unique("conv"));
            retry.retry_of = Some(original.run_id.clone());
            retry.created_ms = original.created_ms + 10 + i;
            store.create_run(&retry).await.unwrap();
            retries.push(retry.run_id);
        }
        let other = record(&unique("run"), &unique("conv"));
        store.create_run(&other).await.unwrap();
        assert_eq!(
            store.retried_as(&original.run_id).await.unwrap(),
            retries,
            "{label}"
        );
        assert!(
            store.retried_as(&other.run_id).await.unwrap().is_empty(),
            "{label}"
        );
    }
    for db in dbs {
        db.finish().await;
    }
}

/// Text search finds a run by its input (a queued run, with no answer yet), by its answer, by
/// its id's start in either case, reads `%`, `_` and quotes literally, and finds nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_finds_a_run_by_its_input_its_answer_or_its_id() {
    on_every_store("search", async |store: &dyn Store, label: &str| {
        let catalog = freeway::catalog::Catalog::builtin();
        let mut jobs = Vec::new();
        for (input, output) in [
            ("Translate the Kraken manual", ""),
            ("plain question", "The answer is 42% of \"it\"_all"),
            ("another question", "nothing to see"),
        ] {
            let body = serde_json::json!({ "user_id": "u1", "input": input,
                "routes": [{ "model": "vendor/m" }] });
            let request =
                freeway::job::RunRequest::from_json(body.to_string().as_bytes(), &catalog).unwrap();
            let job = freeway::job::RunJob::new(request, epoch_ms());
            store.create_queued(&job, job.enqueued_ms).await.unwrap();
            if !output.is_empty() {
                let mut rec = freeway::run::RunRecord::queued(&job, job.enqueued_ms);
                rec.status = RunStatus::Succeeded;
                rec.output = output.into();
                store.save_run(&rec).await.unwrap();
            }
            jobs.push(job.run_id);
        }
        let found = async |q: &str| -> Vec<String> {
            let filter = RunFilter {
                q: Some(q.into()),
                ..RunFilter::default()
            };
            let page = store.list_runs(&filter, None, 10).await.unwrap();
            let counted: u64 = store
                .count_runs(&filter)
                .await
                .unwrap()
                .iter()
                .map(|(_, n)| n)
                .sum();
            assert_eq!(
                counted as usize,
                page.runs.len(),
                "{label}: {q:?} counted as listed"
            );
            let mut ids: Vec<String> = page.runs.into_iter().map(|r| r.run_id).collect();
            ids.sort();
            ids
        };
        assert_eq!(
            found("kraken").await,
            [jobs[0].clone()],
            "{label}: the input of a queued run"
        );
        assert_eq!(
            found("42% OF \"IT\"_ALL").await,
            [jobs[1].clone()],
            "{label}: the answer, literally"
        );
        assert!(
            found("42%_of").await.is_empty(),
            "{label}: % and _ are no wildcards"
        );
        assert_eq!(
            found(&jobs[2][..jobs[2].len() - 1].to_lowercase())
                .await
                .len(),
            1,
            "{label}: an id prefix, any case"
        );
        let mut questions = vec![jobs[1].clone(), jobs[2].clone()];
        questions.sort();
        assert_eq!(
            found("question").await,
            questions,
            "{label}: every input with the word"
        );
        assert!(found("zebra").await.is_empty(), "{label}");
    })
    .await;
}

/// The runs that ended since a moment are counted by status and by bucket of their last
/// update; runs still under way, and runs that ended before it, are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_runs_are_counted_by_status_and_bucket() {
    on_every_store("ended", async |store: &dyn Store, label: &str| {
        let from = 1_000_000_000_000;
        for (status, updated_ms) in [
            (RunStatus::Succeeded, from + 10),
            (RunStatus::Succeeded, from + 599_999),
            (RunStatus::Succeeded, from + 600_000),
            (RunStatus::Failed, from + 1_200_001),
            (RunStatus::Cancelled, from + 5),
            (RunStatus::Refused, from - 1),
            (RunStatus::Running, from + 7),
        ] {
            let mut rec = record(&unique("run"), &unique("conv"));
            rec.status = status;
            rec.created_ms = updated_ms;
            rec.updated_ms = updated_ms;
            store.save_run(&rec).await.unwrap();
        }
        let mut counts: Vec<(&str, u64, u64)> = store
            .ended_since(from, 600_000)
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.status.as_str(), c.bucket, c.runs))
            .collect();
        counts.sort();
        assert_eq!(
            counts,
            [
                ("cancelled", 0, 1),
                ("failed", 2, 1),
                ("succeeded", 0, 2),
                ("succeeded", 1, 1)
            ],
            "{label}"
        );
    })
    .await;
}
