//! Lists of runs for the API and the board: filters, newest first, paged by cursor.
//!
//! An operator looks for the failed runs of the last burst, one user's runs, the runs of one
//! route or code, or one run by a piece of its id or output; lists of thousands are paged by a
//! cursor (the last run shown), never by offset, so a page stays right while new runs arrive.

use crate::run::{Code, RunRecord, RunStatus};

/// The most runs one page holds, whatever the caller asks.
pub const MAX_PAGE: u32 = 200;

/// Which runs a list shows; every field that is set narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub user_id: Option<String>,
    /// The tenant whose share the run takes (its user's, when it named none).
    pub tenant: Option<String>,
    pub status: Option<RunStatus>,
    /// A model one of the run's routes names.
    pub model: Option<String>,
    pub code: Option<Code>,
    /// A prefix of the run's id, or text of its input or its output (either case).
    pub q: Option<String>,
}

/// Where a page starts: just after this run, in the list's order (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    pub created_ms: u64,
    pub run_id: String,
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    pub runs: Vec<RunRecord>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<RunCursor>,
}

impl RunFilter {
    /// The same filter without its status: what the counts per status are taken over.
    pub fn any_status(&self) -> RunFilter {
        RunFilter {
            status: None,
            ..self.clone()
        }
    }

    /// Whether `run`, asked `input`, is in the list (the in-process store's reading of the SQL
    /// conditions).
    pub fn matches(&self, run: &RunRecord, input: Option<&str>) -> bool {
        let q = self.q.as_deref().map(str::to_lowercase);
        self.user_id.as_ref().is_none_or(|u| *u == run.user_id)
            && self.tenant.as_ref().is_none_or(|t| *t == run.tenant)
            && self.status.is_none_or(|s| s == run.status)
            && self.code.is_none_or(|c| Some(c) == run.code)
            && self
                .model
                .as_ref()
                .is_none_or(|m| run.routes.iter().any(|r| r.model == *m))
            && q.is_none_or(|q| {
                run.run_id.to_lowercase().starts_with(&q)
                    || run.output.to_lowercase().contains(&q)
                    || input.is_some_and(|i| i.to_lowercase().contains(&q))
            })
    }
}

impl RunCursor {
    /// The cursor after `run`.
    pub fn after(run: &RunRecord) -> RunCursor {
        RunCursor {
            created_ms: run.created_ms,
            run_id: run.run_id.clone(),
        }
    }

    /// Whether `run` comes after the cursor, newest first.
    pub fn precedes(&self, run: &RunRecord) -> bool {
        (run.created_ms, run.run_id.as_str()) < (self.created_ms, self.run_id.as_str())
    }

    /// The cursor as the API hands it out: `{created_ms}.{run_id}`.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_ms, self.run_id)
    }

    /// A cursor the API handed out; `None` for anything else.
    pub fn decode(text: &str) -> Option<RunCursor> {
        let (created, run_id) = text.split_once('.')?;
        Some(RunCursor {
            created_ms: created.parse().ok()?,
            run_id: crate::job::is_id(run_id).then(|| run_id.to_string())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_what_the_api_never_handed_out() {
        let c = RunCursor {
            created_ms: 1_700_000_000_000,
            run_id: "run_01JX".into(),
        };
        assert_eq!(RunCursor::decode(&c.encode()), Some(c));
        for bad in [
            "",
            "12",
            ".run",
            "x.run",
            "12.",
            "12.run id",
            "12.run'--",
            "-1.run",
        ] {
            assert_eq!(RunCursor::decode(bad), None, "{bad:?}");
        }
    }
}
