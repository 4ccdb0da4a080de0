//! The fair-share scenario's report: the account's windows from the simulator's call log, each
//! tenant's share of them, and the goals checked against them.

use super::workload::{HEAVY_WEIGHT, Pushed, SAMPLE_BEFORE_END_MS, SMALL, Tenant};
use crate::measure::quantile;
use freeway::run::{RunRecord, RunStatus};
use std::collections::{BTreeMap, HashMap};

/// One of the account's windows: its successful calls by tenant, its 429s, and the runs that
/// were enqueued before its end and had not called by then (they waited through some of it).
#[derive(Clone, Default, PartialEq)]
pub(super) struct Window {
    ok: Vec<u32>,
    rejected: u32,
    waiting_at_end: u64,
    /// When its `r`th successful call came, in ms after its start (or after the first enqueue,
    /// in that one's window); full windows only.
    filled_ms: Option<u64>,
}

impl Window {
    fn total(&self) -> u32 {
        self.ok.iter().sum()
    }
}

pub(super) struct Outcome<'a> {
    pub(super) tenants: &'a [Tenant],
    pub(super) pushed: &'a [Pushed],
    pub(super) records: &'a HashMap<String, RunRecord>,
    pub(super) calls: &'a [sim::CallRecord],
    pub(super) r: u32,
    pub(super) window_ms: u64,
    pub(super) t0: u64,
    /// When B–E arrived (`--weights`: when both tenants enqueued).
    pub(super) arrival_ms: u64,
    pub(super) replicas: u16,
}

impl Outcome<'_> {
    fn tenant_of(&self, model: &str) -> Option<usize> {
        self.tenants.iter().position(|t| t.model() == model)
    }

    pub(super) fn report_runs(&self, total_s: f64) {
        let mut by_outcome: BTreeMap<String, u64> = BTreeMap::new();
        for p in self.pushed {
            let key = self.records.get(&p.job.run_id).map_or("?".into(), |rec| {
                let code = rec.code.map_or("", |c| c.as_str());
                format!("{} {code}", rec.status.as_str()).trim().to_string()
            });
            *by_outcome.entry(key).or_default() += 1;
        }
        let outcome: Vec<String> = by_outcome.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!(
            "  runs             {}: {}; all ended {total_s:.1} s after the first enqueue",
            self.pushed.len(),
            outcome.join(", ")
        );
    }

    /// The account's windows from the first call's to the last's, by their index.
    pub(super) fn windows(&self) -> BTreeMap<u64, Window> {
        let n = self.tenants.len();
        let mut ok: Vec<(u64, usize)> = vec![];
        let mut table: BTreeMap<u64, Window> = BTreeMap::new();
        for c in self.calls {
            let Some(t) = self.tenant_of(&c.model) else {
                continue;
            };
            let w = table
                .entry(c.t_ms / self.window_ms)
                .or_insert_with(|| Window {
                    ok: vec![0; n],
                    ..Default::default()
                });
            match c.status {
                200 => {
                    w.ok[t] += 1;
                    ok.push((c.t_ms, t));
                }
                429 => w.rejected += 1,
                _ => {}
            }
        }
        let (Some(&first), Some(&last)) = (table.keys().next(), table.keys().next_back()) else {
            return table;
        };
        ok.sort_unstable();
        let mut enqueued: Vec<u64> = self.pushed.iter().map(|p| p.job.enqueued_ms).collect();
        enqueued.sort_unstable();
        for w in first..=last {
            let (start, end) = (w * self.window_ms, (w + 1) * self.window_ms);
            let row = table.entry(w).or_insert_with(|| Window {
                ok: vec![0; n],
                ..Default::default()
            });
            let arrived = enqueued.partition_point(|&e| e < end) as u64;
            let called = ok.partition_point(|&(t, _)| t < end) as u64;
            row.waiting_at_end = arrived.saturating_sub(called);
            // From the window's start, or from the first enqueue when that came later.
            let from = start.max(self.t0);
            let before = ok.partition_point(|&(t, _)| t < start);
            row.filled_ms = ok
                .get(before + self.r as usize - 1)
                .filter(|(t, _)| *t < end)
                .map(|(t, _)| t.saturating_sub(from));
        }
        table
    }

    /// Each window as a row: its index from the arrival's window, calls by tenant, 429s and
    /// runs left waiting at its end; runs of identical rows are folded.
    fn print_windows(&self, table: &BTreeMap<u64, Window>) {
        let arrival_w = self.arrival_ms / self.window_ms;
        let names: Vec<String> = self
            .tenants
            .iter()
            .map(|t| format!("{:>3}", t.name))
            .collect();
        println!(
            "  windows          k = account window from the arrival's (k = 0: arrival {:.2} s into \
             it); successful calls by tenant; 429s; runs enqueued and not yet called at its end",
            (self.arrival_ms % self.window_ms) as f64 / 1000.0
        );
        println!("                     k   ok {} 429 waiting", names.join(""));
        let rows: Vec<(i64, &Window)> = table
            .iter()
            .map(|(&w, row)| (w as i64 - arrival_w as i64, row))
            .collect();
        let mut i = 0;
        while i < rows.len() {
            let (k, row) = rows[i];
            let mut j = i + 1;
            // Fold a run of rows alike but for the waiting runs (a backlog draining).
            while j < rows.len()
                && rows[j].1.ok == row.ok
                && rows[j].1.rejected == row.rejected
                && (rows[j].1.waiting_at_end > 0) == (row.waiting_at_end > 0)
            {
                j += 1;
            }
            let cells: Vec<String> = row
                .ok
                .iter()
                .map(|n| {
                    if *n == 0 {
                        format!("{:>3}", ".")
                    } else {
                        format!("{n:>3}")
                    }
                })
                .collect();
            let (ks, waiting) = if j - i > 2 {
                (
                    format!("{k}..{}", rows[j - 1].0),
                    format!(
                        "{}..{} ({} windows alike)",
                        row.waiting_at_end,
                        rows[j - 1].1.waiting_at_end,
                        j - i
                    ),
                )
            } else {
                j = i + 1;
                (k.to_string(), row.waiting_at_end.to_string())
            };
            println!(
                "                 {ks:>5} {:>4} {} {:>3} {waiting}",
                row.total(),
                cells.join(""),
                row.rejected
            );
            i = j;
        }
    }

    /// Unused slots (fewer than R successful calls in a window at whose end runs still waited),
    /// platform 429s, and how long after a backlogged window's start its last slot was used.
    fn common_checks(&self, table: &BTreeMap<u64, Window>) {
        let r = self.r;
        let waited: Vec<(&u64, &Window)> =
            table.iter().filter(|(_, w)| w.waiting_at_end > 0).collect();
        let unused: Vec<String> = waited
            .iter()
            .filter(|(_, w)| w.total() < r)
            .map(|(w, row)| {
                format!(
                    "k={} {}/{r} with {} waiting",
                    **w as i64 - (self.arrival_ms / self.window_ms) as i64,
                    row.total(),
                    row.waiting_at_end
                )
            })
            .collect();
        let unused_slots: u32 = waited
            .iter()
            .map(|(_, w)| r.saturating_sub(w.total()))
            .sum();
        let mut fill: Vec<u64> = waited.iter().filter_map(|(_, w)| w.filled_ms).collect();
        let platform: Vec<&sim::CallRecord> = self
            .calls
            .iter()
            .filter(|c| c.status == 429 && c.variant.starts_with("free_per_"))
            .collect();
        let other_429s = self.calls.iter().filter(|c| c.status == 429).count() - platform.len();
        let over: Vec<String> = table
            .iter()
            .filter(|(_, w)| w.total() > r)
            .map(|(w, row)| format!("window {w}: {}", row.total()))
            .collect();
        println!(
            "  window fill      a window at whose end runs still waited had its {r}th call {} ms \
             (median), {} ms (max) after its start or the first enqueue ({} such windows){}",
            quantile(&mut fill, 0.5).map_or("?".into(), |v| v.to_string()),
            quantile(&mut fill, 1.0).map_or("?".into(), |v| v.to_string()),
            waited.len(),
            if over.is_empty() {
                String::new()
            } else {
                format!("; over R: {}", over.join(", "))
            }
        );
        let no_unused = unused.is_empty();
        println!(
            "  [{}] no slot unused while a run waits: {unused_slots} unused slots in {} of {} \
             windows with runs waiting at their end{}",
            mark(no_unused),
            unused.len(),
            waited.len(),
            if no_unused {
                String::new()
            } else {
                format!(" ({})", unused.join(", "))
            }
        );
        let no_429s = platform.is_empty();
        println!(
            "  [{}] 0 platform 429s: {} platform 429s ({other_429s} other 429s){}",
            mark(no_429s),
            platform.len(),
            platform.first().map_or(String::new(), |c| format!(
                ", the first at {} ms into its window",
                c.t_ms % self.window_ms
            ))
        );
    }

    pub(super) fn report_goal(
        &self,
        table: &BTreeMap<u64, Window>,
        samples: &[(u64, freeway::pace::PoolUse)],
    ) {
        let (r, wms) = (self.r, self.window_ms as f64);
        let arrival_w = self.arrival_ms / self.window_ms;
        self.print_windows(table);

        // Completion, by tenant, in windows after B–E's arrival.
        println!("  completion       windows after B–E's arrival (A: after its own enqueue too)");
        let mut finish: Vec<Vec<u64>> = vec![vec![]; self.tenants.len()];
        for p in self.pushed {
            if let Some(rec) = self.records.get(&p.job.run_id)
                && rec.status == RunStatus::Succeeded
            {
                finish[p.tenant].push(rec.updated_ms);
            }
        }
        let rel = |ms: u64| (ms as f64 - self.arrival_ms as f64) / wms;
        for (t, tenant) in self.tenants.iter().enumerate() {
            let f = &mut finish[t];
            f.sort_unstable();
            let (Some(&first), Some(&last)) = (f.first(), f.last()) else {
                println!("                   {}: no run succeeded", tenant.name);
                continue;
            };
            let since_own = if t == 0 {
                format!(" ({:.2} after A's enqueue)", (last - self.t0) as f64 / wms)
            } else {
                String::new()
            };
            println!(
                "                   {} {:>3} runs ({}): first {:+.2}, last {:+.2}{since_own}",
                tenant.name,
                f.len(),
                tenant.priority,
                rel(first),
                rel(last)
            );
        }

        // B–E's share of each window from their arrival until their runs are done.
        let late = 1..self.tenants.len();
        let late_total = self.tenants[1..].iter().map(|t| t.runs).sum::<usize>() as u32;
        let late_in_arrival: u32 = table
            .get(&arrival_w)
            .map_or(0, |row| row.ok[late.clone()].iter().sum());
        let in_arrival = self
            .calls
            .iter()
            .filter(|c| {
                c.status == 200
                    && c.t_ms >= self.arrival_ms
                    && c.t_ms / self.window_ms == arrival_w
                    && self.tenant_of(&c.model).is_some()
            })
            .count();
        let mut left = late_total.saturating_sub(late_in_arrival);
        let mut shares = vec![];
        let mut share_met = true;
        for (&w, row) in table.range(arrival_w + 1..) {
            if left == 0 {
                break;
            }
            let got: u32 = row.ok[late.clone()].iter().sum();
            let need = f64::from(left).min(0.8 * f64::from(r));
            let met = f64::from(got) >= need;
            share_met &= met;
            shares.push(format!(
                "k={} {got}/{}{}",
                w - arrival_w,
                row.total(),
                if met { "" } else { " (short)" }
            ));
            left = left.saturating_sub(got);
        }
        println!("  goal (docs/design.md §4.7)");
        println!(
            "  [{}] B–E take ≥ 4/5 of each window's slots from their arrival until done (or all \
             they still need): {}; in the arrival window (k=0) {in_arrival} calls came after \
             their arrival, {late_in_arrival} of them theirs",
            mark(share_met && left == 0),
            shares.join(", ")
        );
        let bound = (SMALL as f64 / (f64::from(r) / 5.0)).ceil() + 1.0;
        let mut within = true;
        let each: Vec<String> = late
            .clone()
            .map(|t| {
                let last = finish[t].last().map_or(f64::INFINITY, |&ms| rel(ms));
                within &= last <= bound && finish[t].len() == self.tenants[t].runs;
                format!("{} {last:.2}", self.tenants[t].name)
            })
            .collect();
        println!(
            "  [{}] each of B–E finishes within ⌈{SMALL} / ({r}/5)⌉ + 1 = {bound} windows of its \
             arrival: {}",
            mark(within),
            each.join(", ")
        );
        // A drains the rest: every slot B–E leave goes to A while A waits.
        let a_total = self.tenants[0].runs;
        let a_done = finish[0].len() == a_total;
        let ideal = (self.pushed.len() as u64).div_ceil(u64::from(r));
        let last_w = table.keys().next_back().copied().unwrap_or(0);
        let first_w = self.t0 / self.window_ms;
        println!(
            "  [{}] A drains the rest: {} of {a_total} A runs succeeded, the last call in the \
             {}th window from A's enqueue's; {} runs at R a window fill {ideal}",
            mark(a_done && last_w - first_w < ideal),
            finish[0].len(),
            last_w - first_w + 1,
            self.pushed.len(),
        );
        self.common_checks(table);
        println!(
            "  [{}] with 3 replicas: {} replicas",
            mark(self.replicas == 3),
            self.replicas
        );
        // What the pacer said (GET /v1/pools), around the arrival.
        let shown: Vec<String> = samples
            .iter()
            .filter(|(w, _)| *w + 1 >= arrival_w && *w <= arrival_w + bound as u64 + 1)
            .map(|(w, u)| {
                let shares: Vec<String> = u
                    .shares
                    .iter()
                    .map(|s| format!("{} {}", s.tenant, s.slots))
                    .collect();
                format!(
                    "k={}: {} waiting, {} tenants waiting, shares [{}]",
                    *w as i64 - arrival_w as i64,
                    u.waiting,
                    u.tenants_waiting,
                    shares.join(", ")
                )
            })
            .collect();
        if !shown.is_empty() {
            println!(
                "  pacer usage      {} ms before each window's end: {}",
                SAMPLE_BEFORE_END_MS,
                shown.join("; ")
            );
        }
    }

    pub(super) fn report_weights(&self, table: &BTreeMap<u64, Window>, fields: bool) {
        let r = self.r;
        self.print_windows(table);
        let weight = if fields { HEAVY_WEIGHT } else { 1 };
        let heavy_share = f64::from(HEAVY_WEIGHT) / f64::from(HEAVY_WEIGHT + 1);
        // Windows at whose end both tenants still had runs waiting: both were backlogged.
        let mut called = [0u64; 2];
        let mut enqueued = [0u64; 2];
        for p in self.pushed {
            enqueued[p.tenant] += 1;
        }
        let mut splits = vec![];
        let mut met = true;
        for (&w, row) in table {
            let before = called;
            called[0] += u64::from(row.ok[0]);
            called[1] += u64::from(row.ok[1]);
            let both = (0..2).all(|t| called[t] < enqueued[t]);
            // The first window's slots went to the first runs taken, before anyone waited.
            if !both || w * self.window_ms <= self.t0 || before == [0, 0] {
                continue;
            }
            let want = heavy_share * f64::from(row.total());
            let ok = (f64::from(row.ok[0]) - want).abs() <= 1.0;
            met &= ok;
            splits.push(format!(
                "{}:{}{}",
                row.ok[0],
                row.ok[1],
                if ok { "" } else { "!" }
            ));
        }
        println!(
            "  [{}] while both wait, each window splits {HEAVY_WEIGHT}:1 ± 1 (P {:.0} ± 1 of \
             {r}; weights configured {weight}:1): P:Q {}",
            mark(met && !splits.is_empty()),
            heavy_share * f64::from(r),
            splits.join(" ")
        );
        self.common_checks(table);
    }
}

fn mark(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}
