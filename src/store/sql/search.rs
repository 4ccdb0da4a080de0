//! Text search over runs (the `q` of the run list): a run is found by its id's start, or by text
//! of its input or its answer, in either case, in a time that does not grow with the table. A
//! scan of every output (it was `instr` over the table, twice a second from the board) took
//! 215–350 ms at 43,000 runs.
//!
//! The two backends index differently, so this is the one place the store speaks each one's
//! dialect (the migrations are one text for both):
//! - SQLite: an FTS5 table with the trigram tokenizer (`runs_text`, contentless, rows keyed by
//!   the run's rowid), kept by triggers: a run's input when its job is kept, its answer when its
//!   output changes. A query of fewer than three characters (no trigram) scans the outputs.
//! - PostgreSQL: `pg_trgm` GIN indexes on the lowered output and the job's input, which serve
//!   `LIKE '%…%'`. A server where the extension cannot be created searches all the same, by
//!   scan, and the store says so once in its log.
//!
//! [`ensure_sqlite`] and [`ensure_postgres`] create what is missing when a store opens, under
//! the same lock as the migrations; a table that predates the index is filled once.

use super::db::{Backend, db_error};
use crate::store::StoreError;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

/// The input of the run whose id is `$id` (an expression with `$id` to replace).
const INPUT_OF: &str =
    "COALESCE((SELECT json_extract(job, '$.request.input') FROM run_jobs WHERE run_id = $id), '')";

/// The table and its triggers. A run's row is (re)written whole whenever its input or its
/// answer arrives: a contentless table keeps no text to update in place.
fn sqlite_index() -> [String; 5] {
    let input = |id: &str| INPUT_OF.replace("$id", id);
    [
        "CREATE VIRTUAL TABLE runs_text USING fts5(input, output, content='', \
         contentless_delete=1, tokenize='trigram')"
            .to_string(),
        format!(
            "CREATE TRIGGER runs_text_run AFTER INSERT ON runs WHEN NEW.output <> '' BEGIN \
             DELETE FROM runs_text WHERE rowid = NEW.rowid; \
             INSERT INTO runs_text(rowid, input, output) VALUES (NEW.rowid, {}, NEW.output); END",
            input("NEW.run_id")
        ),
        "CREATE TRIGGER runs_text_job AFTER INSERT ON run_jobs BEGIN \
         DELETE FROM runs_text WHERE rowid = (SELECT rowid FROM runs WHERE run_id = NEW.run_id); \
         INSERT INTO runs_text(rowid, input, output) SELECT r.rowid, \
         COALESCE(json_extract(NEW.job, '$.request.input'), ''), r.output \
         FROM runs r WHERE r.run_id = NEW.run_id; END"
            .to_string(),
        format!(
            "CREATE TRIGGER runs_text_output AFTER UPDATE OF output ON runs \
             WHEN NEW.output <> OLD.output BEGIN \
             DELETE FROM runs_text WHERE rowid = OLD.rowid; \
             INSERT INTO runs_text(rowid, input, output) VALUES (NEW.rowid, {}, NEW.output); END",
            input("NEW.run_id")
        ),
        "CREATE TRIGGER runs_text_gone AFTER DELETE ON runs BEGIN \
         DELETE FROM runs_text WHERE rowid = OLD.rowid; END"
            .to_string(),
    ]
}

/// Every run stored before the index, indexed once when the index is made.
const SQLITE_FILL: &str = "INSERT INTO runs_text(rowid, input, output) SELECT r.rowid, \
     COALESCE(json_extract(j.job, '$.request.input'), ''), r.output \
     FROM runs r LEFT JOIN run_jobs j ON j.run_id = r.run_id";

/// Create the SQLite index, its triggers and its first fill, unless the file has them.
pub(super) async fn ensure_sqlite(pool: &SqlitePool) -> Result<(), StoreError> {
    const EXISTS: &str = "SELECT COUNT(*) FROM sqlite_master WHERE name = 'runs_text'";
    let mut tx = pool.begin().await.map_err(db_error)?;
    let (n,): (i64,) = sqlx::query_as(EXISTS)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
    if n > 0 {
        return Ok(());
    }
    for sql in sqlite_index().into_iter().chain([SQLITE_FILL.to_string()]) {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)
}

const PG_INDEX: [&str; 2] = [
    "CREATE INDEX IF NOT EXISTS runs_output_trgm ON runs USING gin (lower(output) gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS run_jobs_input_trgm ON run_jobs \
     USING gin (lower(job::jsonb #>> '{request,input}') gin_trgm_ops)",
];

/// Create the PostgreSQL indexes unless they are there; replicas starting at once take turns
/// (an advisory lock), as they do for the migrations. Indexes that exist are found in the
/// catalog, which locks no table: a `CREATE INDEX IF NOT EXISTS` locks its table even when it
/// does nothing, and with a replica's prune deleting from both tables in the other order, that
/// was a deadlock.
pub(super) async fn ensure_postgres(pool: &PgPool) -> Result<(), StoreError> {
    const LOCK: &str = "SELECT pg_advisory_xact_lock(7465786530001)";
    const THERE: &str = "SELECT to_regclass('runs_output_trgm') IS NOT NULL \
         AND to_regclass('run_jobs_input_trgm') IS NOT NULL";
    let (there,): (bool,) = sqlx::query_as(THERE)
        .fetch_one(pool)
        .await
        .map_err(db_error)?;
    if there {
        return Ok(());
    }
    let mut tx = pool.begin().await.map_err(db_error)?;
    sqlx::query(LOCK)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    // Another replica may have made them while this one waited for its turn.
    let (there,): (bool,) = sqlx::query_as(THERE)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
    if there {
        return Ok(());
    }
    if let Err(error) = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        .execute(&mut *tx)
        .await
    {
        tracing::warn!(%error, "pg_trgm cannot be created here: run search scans the table");
        return Ok(());
    }
    for sql in PG_INDEX {
        sqlx::query(sql).execute(&mut *tx).await.map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)
}

/// The condition of a text search, as one set of rows (the planner keeps to the indexes, where
/// an `OR` of id ranges and an index lookup read the whole table): runs whose id is in one of
/// `ids` (parameter pairs of [`id_ranges`]), and on SQLite those whose text has the FTS5 phrase
/// `text`, on PostgreSQL those whose output or input is `LIKE` the pattern `text`.
pub(super) fn condition(backend: Backend, ids: &[(String, String)], text: &str) -> String {
    let ids = id_selects(ids);
    match backend {
        Backend::Sqlite => format!(
            "run_id IN ({ids} UNION SELECT run_id FROM runs WHERE rowid IN \
             (SELECT rowid FROM runs_text WHERE runs_text MATCH {text}))"
        ),
        Backend::Postgres => format!(
            "run_id IN ({ids} UNION SELECT run_id FROM runs WHERE lower(output) LIKE {text} \
             ESCAPE '\\' UNION SELECT run_id FROM run_jobs \
             WHERE lower(job::jsonb #>> '{{request,input}}') LIKE {text} ESCAPE '\\')"
        ),
    }
}

/// [`condition`] on SQLite for a query too short for a trigram: the id ranges, or a scan of the
/// outputs for `q`.
pub(super) fn short_condition(ids: &[(String, String)], q: &str) -> String {
    format!(
        "(run_id IN ({}) OR instr(lower(output), {q}) > 0)",
        id_selects(ids)
    )
}

fn id_selects(ids: &[(String, String)]) -> String {
    ids.iter()
        .map(|(from, to)| {
            format!("SELECT run_id FROM runs WHERE run_id >= {from} AND run_id < {to}")
        })
        .collect::<Vec<_>>()
        .join(" UNION ")
}

/// The id ranges a query's id prefix covers, in either case (`from` ≤ id < `to`): run ids are
/// `run_` and an upper-case ULID, typed in any case. An index seek each.
pub(super) fn id_ranges(q: &str) -> Vec<(String, String)> {
    let prefixes: Vec<String> = match q.get(..4) {
        Some(head) if head.eq_ignore_ascii_case("run_") => {
            let tail = &q[4..];
            vec![
                format!("run_{}", tail.to_ascii_uppercase()),
                format!("run_{}", tail.to_ascii_lowercase()),
            ]
        }
        _ => vec![
            q.to_string(),
            q.to_ascii_uppercase(),
            q.to_ascii_lowercase(),
        ],
    };
    let mut ranges: Vec<(String, String)> = Vec::new();
    for from in prefixes {
        if !ranges.iter().any(|(f, _)| *f == from) {
            let to = format!("{from}\u{10FFFF}");
            ranges.push((from, to));
        }
    }
    ranges
}

/// `q` as an FTS5 phrase (a quoted string: no query syntax of its own), when it has a trigram.
pub(super) fn fts_phrase(q: &str) -> Option<String> {
    (q.chars().count() >= 3).then(|| format!("\"{}\"", q.replace('"', "\"\"")))
}

/// `q` as a `LIKE` pattern that matches it anywhere, its own `%`, `_` and `\` taken literally.
pub(super) fn like_anywhere(q: &str) -> String {
    let escaped = q
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_data_in_every_dialect() {
        assert_eq!(fts_phrase("ab"), None, "no trigram");
        assert_eq!(
            fts_phrase(r#"say "hi""#).as_deref(),
            Some(r#""say ""hi""""#)
        );
        assert_eq!(like_anywhere(r"50%_\x"), r"%50\%\_\\x%");
        let froms = |q| id_ranges(q).into_iter().map(|(f, _)| f).collect::<Vec<_>>();
        assert_eq!(froms("RUN_01j"), ["run_01J", "run_01j"]);
        assert_eq!(froms("run_1"), ["run_1"]);
        assert_eq!(froms("Bob"), ["Bob", "BOB", "bob"]);
        assert!(
            id_ranges("x")
                .iter()
                .all(|(f, t)| t.starts_with(f.as_str()) && t > f)
        );
    }
}
