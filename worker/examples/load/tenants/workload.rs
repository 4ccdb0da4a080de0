//! What the fair-share scenario enqueues: its tenants, the runs as pushed, and the numbers that
//! shape the workload, which the scenario and its report both read.

use freeway::job::RunJob;
use std::time::Duration;

/// The built-in pool of OpenRouter's free models; with one platform key, its one instance.
pub(super) const POOL: &str = "openrouter-free";
/// The goal's workload: A's backlog, and the runs each of B–E enqueues behind it.
pub(super) const BACKLOG: usize = 500;
pub(super) const SMALL: usize = 5;
/// `--weights`: runs each of the two tenants enqueues, and the heavy tenant's tier's weight.
pub(super) const WEIGHED: usize = 100;
pub(super) const HEAVY_WEIGHT: u32 = 4;
/// How often the store is read for runs that have not ended yet.
pub(super) const POLL: Duration = Duration::from_millis(500);
/// The pacer's usage is read this long before each window ends.
pub(super) const SAMPLE_BEFORE_END_MS: u64 = 400;

pub(super) struct Tenant {
    pub(super) name: &'static str,
    pub(super) runs: usize,
    pub(super) priority: &'static str,
    pub(super) tier: Option<&'static str>,
}

impl Tenant {
    pub(super) fn model(&self) -> String {
        format!("freeway-load/tenant-{}:free", self.name.to_lowercase())
    }
}

/// A run as the scenario pushed it: its tenant (an index) and its job.
pub(super) struct Pushed {
    pub(super) tenant: usize,
    pub(super) job: RunJob,
}
