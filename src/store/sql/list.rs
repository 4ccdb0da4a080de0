//! The SQL of run lists ([`crate::store::list`]): one statement built from the filter's set
//! fields, each value a bound parameter. Substrings are found with the backend's own function
//! (`instr`, `strpos`), which reads no pattern syntax and is case-sensitive on both.

use super::Backend;
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
        let q = q.to_lowercase();
        let p = param(Bind::Text(q), &mut binds);
        clauses.push(format!(
            "(substr(lower(run_id), 1, length({p})) = {p} OR {})",
            contains("lower(output)", &p)
        ));
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
