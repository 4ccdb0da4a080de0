//! The SQL of run lists ([`crate::store::list`]): one statement built from the filter's set
//! fields, each value a bound parameter. A route's model is found with the backend's own substring
//! function (`instr`, `strpos`), which reads no pattern syntax; a text search goes through the
//! search index ([`super::search`]).

use super::db::Backend;
use super::search;
use crate::store::list::{RunCursor, RunFilter};

/// A value bound to the statement, in parameter order.
pub(super) enum Bind {
    Text(String),
    Int(i64),
}

/// A statement and its parameters.
pub(super) struct Statement {
    pub sql: String,
    pub binds: Vec<Bind>,
}

/// `WHERE …` for `filter` (and the cursor, when paging), or nothing.
fn conditions(backend: Backend, filter: &RunFilter, after: Option<&RunCursor>) -> Statement {
    let mut clauses: Vec<String> = Vec::new();
    let mut binds = Vec::new();
    let param = |value: Bind, binds: &mut Vec<Bind>| {
        binds.push(value);
        format!("${}", binds.len())
    };
    let contains = |haystack: &str, needle: &str| match backend {
        Backend::Sqlite => format!("instr({haystack}, {needle}) > 0"),
        Backend::Postgres => format!("strpos({haystack}, {needle}) > 0"),
    };
    if let Some(user) = &filter.user_id {
        let p = param(Bind::Text(user.clone()), &mut binds);
        clauses.push(format!("user_id = {p}"));
    }
    if let Some(tenant) = &filter.tenant {
        // A run stored before tenants has none: it is its user's, as the record reads it.
        let p = param(Bind::Text(tenant.clone()), &mut binds);
        clauses.push(format!("COALESCE(tenant, user_id) = {p}"));
    }
    if let Some(status) = filter.status {
        let p = param(Bind::Text(status.as_str().into()), &mut binds);
        clauses.push(format!("status = {p}"));
    }
    if let Some(code) = filter.code {
        let p = param(Bind::Text(code.as_str().into()), &mut binds);
        clauses.push(format!("code = {p}"));
    }
    if let Some(model) = &filter.model {
        // Routes are stored as compact JSON: a route of the model holds `"model":"…"`.
        let needle = format!("\"model\":{}", serde_json::Value::from(model.as_str()));
        let p = param(Bind::Text(needle), &mut binds);
        clauses.push(contains("routes", &p));
    }
    if let Some(q) = &filter.q {
        let ids: Vec<(String, String)> = search::id_ranges(q)
            .into_iter()
            .map(|(from, to)| {
                let from = param(Bind::Text(from), &mut binds);
                (from, param(Bind::Text(to), &mut binds))
            })
            .collect();
        let q = q.to_lowercase();
        let clause = match (backend, search::fts_phrase(&q)) {
            (Backend::Sqlite, None) => {
                search::short_condition(&ids, &param(Bind::Text(q), &mut binds))
            }
            (Backend::Sqlite, Some(phrase)) => {
                search::condition(backend, &ids, &param(Bind::Text(phrase), &mut binds))
            }
            (Backend::Postgres, _) => {
                let like = param(Bind::Text(search::like_anywhere(&q)), &mut binds);
                search::condition(backend, &ids, &like)
            }
        };
        clauses.push(clause);
    }
    if let Some(cursor) = after {
        let created = param(Bind::Int(to_i64(cursor.created_ms)), &mut binds);
        let id = param(Bind::Text(cursor.run_id.clone()), &mut binds);
        clauses.push(format!(
            "(created_ms < {created} OR (created_ms = {created} AND run_id < {id}))"
        ));
    }
    let sql = match clauses.is_empty() {
        true => String::new(),
        false => format!(" WHERE {}", clauses.join(" AND ")),
    };
    Statement { sql, binds }
}

/// The runs of a page, newest first: `limit` rows after `after`.
pub(super) fn page(
    backend: Backend,
    filter: &RunFilter,
    after: Option<&RunCursor>,
    limit: u32,
) -> Statement {
    let mut s = conditions(backend, filter, after);
    s.binds.push(Bind::Int(i64::from(limit)));
    s.sql = format!(
        "SELECT {} FROM runs{} ORDER BY created_ms DESC, run_id DESC LIMIT ${}",
        run_columns!(),
        s.sql,
        s.binds.len()
    );
    s
}

/// The runs `filter` matches, counted by status.
pub(super) fn counts(backend: Backend, filter: &RunFilter) -> Statement {
    let mut s = conditions(backend, filter, None);
    s.sql = format!(
        "SELECT status, COUNT(*) AS runs FROM runs{} GROUP BY status",
        s.sql
    );
    s
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
