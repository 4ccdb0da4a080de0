//! Fair share of a pool's slots between tenants (docs/design.md §4.7), in one process: the
//! order `pace.lua` hands out slots to waiting runs, kept by [`super::MemoryPacer`].
//!
//! One account serves many tenants: first come, first served, one tenant's batch of 500 runs
//! takes every slot of the next 25 windows from a customer who asks once behind it. So once
//! runs wait for a pool, nobody takes its slots but through its queue, and the queue hands
//! them out by WF2Q+ (Bennett and Zhang's worst-case fair weighted fair queueing), a slot being
//! one unit of work:
//! - a run that joins gets a start tag `S = max(V, F_last of its tenant)` and a finish tag
//!   `F = S + 1/weight`; a tenant's runs chain, so they keep their order;
//! - a slot goes to the smallest `F` among runs whose `S ≤ V` (eligible), and `V` then moves on
//!   by `1/W`, `W` the weights of the tenants waiting (work-conserving: a tenant alone gets
//!   every slot), or to the smallest waiting `S` when nothing is eligible.
//!
//! Eligibility is what keeps a heavy tenant from taking its whole share in a burst: each
//! waiting tenant's slots stay within one of its weighted share at every moment. Every step is
//! a few operations on sorted sets (two per lane: eligible by `F`, pending by `S`); nothing
//! walks the tenants, so an admit costs the same with ten tenants waiting or ten thousand.
//! Interactive runs are served before batch runs, each lane fairly.

use std::collections::{BTreeSet, HashMap};

/// Which runs a pool serves first: interactive ones, then batch ones (docs/design.md §4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lane {
    #[default]
    Interactive,
    Batch,
}

impl Lane {
    pub(crate) fn index(self) -> usize {
        match self {
            Lane::Interactive => 0,
            Lane::Batch => 1,
        }
    }
}

/// A run asking a shared pool for a slot, as fair share sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter<'a> {
    pub run_id: &'a str,
    /// Its tenant (the `tenant` field, or its user).
    pub tenant: &'a str,
    /// Its tier's weight (at least 1).
    pub weight: u32,
    pub lane: Lane,
    /// Past it, the run no longer waits: its place is dropped when it comes up.
    pub deadline_ms: u64,
}

/// What joining a pool's queue gave a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// A slot of the current window, counted for the run, usable until `valid_ms` from now.
    Granted { valid_ms: u64 },
    /// The run waits its turn; about this long, by its place in the queue. It is woken when a
    /// slot is granted to it ([`super::Pacer::dispatch`]).
    Queued { wait_ms: u64 },
    /// The pool's day is spent: no turn comes before it ends, in this long; the run joined no
    /// queue.
    DaySpent { wait_ms: u64 },
}

/// How much of a slot a tenant must be owed before its run may take one, and how little it may
/// be owed by the slot it takes: Tijdeman's 1/(2n-2) for the chairman assignment, which keeps
/// every tenant within one slot of its share however shares change, for n = 20 tenants (more
/// tenants only need a smaller margin, and this one errs on the side of the tenant that waits).
const MARGIN: f64 = 1.0 / 38.0;

/// When a run of a tenant of `weight` whose share of slots reaches its start tag `start` may
/// take a slot, and by when it should (both in virtual time).
fn window_of_turn(start: f64, weight: u32) -> (f64, f64) {
    let slot = 1.0 / f64::from(weight);
    (start + MARGIN * slot, start + (1.0 - MARGIN) * slot)
}

/// A tag (a non-negative float) as a key that sorts as the float does.
fn key(tag: f64) -> u64 {
    tag.max(0.0).to_bits()
}

#[derive(Debug, Default)]
struct Tenant {
    last_finish: f64,
    waiting: u32,
    weight: u32,
}

#[derive(Debug, Clone)]
struct Entry {
    lane: usize,
    tenant: String,
    /// Eligible once the virtual time reaches it: its tenant is owed a little of a slot.
    from: f64,
    /// By when it should have its slot, in virtual time: its tenant would be owed nearly one.
    by: f64,
    tokens: u32,
    deadline_ms: u64,
}

/// One lane's WF2Q+ state.
#[derive(Debug, Default)]
struct LaneQueue {
    /// The virtual time.
    v: f64,
    /// The weights of the tenants with runs waiting.
    weights: f64,
    tenants: HashMap<String, Tenant>,
    /// Runs whose start tag has come, by finish tag.
    eligible: BTreeSet<(u64, String)>,
    /// Runs whose start tag is still ahead of the virtual time, by start tag.
    pending: BTreeSet<(u64, String)>,
}

impl LaneQueue {
    /// The virtual time once the next slot is served: each waiting tenant's share of a slot
    /// is its weight over the weights waiting.
    fn next_v(&self) -> f64 {
        if self.weights > 0.0 {
            self.v + 1.0 / self.weights
        } else {
            self.v
        }
    }
}

/// A pool instance's waiting runs, the slots granted to some of them and not used yet, and
/// what each tenant got this window.
#[derive(Debug, Default)]
pub(crate) struct FairQueue {
    lanes: [LaneQueue; 2],
    entries: HashMap<String, Entry>,
    /// Granted runs: until when (epoch ms) the slot counted for each may be used.
    grants: HashMap<String, u64>,
    /// Runs granted a slot that nobody told yet (for [`super::Pacer::dispatch`]).
    untold: Vec<String>,
    /// The window whose shares are counted, and each tenant's slots in it.
    shares: (u64, HashMap<String, u32>),
}

impl FairQueue {
    /// Runs waiting, in both lanes.
    pub(crate) fn waiting(&self) -> usize {
        self.entries.len()
    }

    /// Tenants with runs waiting.
    pub(crate) fn tenants_waiting(&self) -> usize {
        let waiting = |l: &LaneQueue| l.tenants.values().filter(|t| t.waiting > 0).count();
        self.lanes.iter().map(waiting).sum()
    }

    /// Forget grants whose slot is past.
    pub(crate) fn expire(&mut self, now_ms: u64) {
        self.grants.retain(|_, until| *until > now_ms);
    }

    /// The run uses its granted slot: it is no longer held for it.
    pub(crate) fn take_grant(&mut self, run_id: &str) {
        self.grants.remove(run_id);
    }

    /// Until when the slot granted to `run_id` may be used (a past one may still be listed).
    pub(crate) fn grant_until(&self, run_id: &str) -> Option<u64> {
        self.grants.get(run_id).copied()
    }

    /// Add `who` to its lane (a run already waiting keeps its place).
    pub(crate) fn enter(&mut self, who: &Waiter<'_>, tokens: u32) {
        if self.entries.contains_key(who.run_id) {
            return;
        }
        let l = who.lane.index();
        let lane = &mut self.lanes[l];
        let weight = who.weight.max(1);
        let tenant = lane.tenants.entry(who.tenant.to_string()).or_default();
        // A tenant waiting already chains its runs, owed or ahead; one that comes back starts
        // now, or where its last run ended if that is later (it still owes that slot: its
        // share stood still while it was away, as its use did).
        let start = match tenant.waiting {
            0 => lane.v.max(tenant.last_finish),
            _ => tenant.last_finish,
        };
        let finish = start + 1.0 / f64::from(weight);
        tenant.last_finish = finish;
        tenant.waiting += 1;
        if tenant.waiting == 1 {
            tenant.weight = weight;
            lane.weights += f64::from(weight);
        }
        let run = who.run_id.to_string();
        let (from, by) = window_of_turn(start, weight);
        if from <= lane.v {
            lane.eligible.insert((key(by), run.clone()));
        } else {
            lane.pending.insert((key(from), run.clone()));
        }
        self.entries.insert(
            run,
            Entry {
                lane: l,
                tenant: who.tenant.to_string(),
                from,
                by,
                tokens,
                deadline_ms: who.deadline_ms,
            },
        );
    }

    /// How many runs are ahead of `who` (or of where it would join), roughly: in its lane,
    /// those with a smaller finish tag; in a later lane, none; an earlier lane, all.
    pub(crate) fn ahead(&self, who: &Waiter<'_>) -> u64 {
        let l = who.lane.index();
        let lane = &self.lanes[l];
        let by = match self.entries.get(who.run_id) {
            Some(e) => e.by,
            None => {
                let last = lane.tenants.get(who.tenant).map_or(0.0, |t| t.last_finish);
                window_of_turn(lane.v.max(last), who.weight.max(1)).1
            }
        };
        // In the eligible runs its rank, as `ZRANK` gives it (equal tags by id); a run not among
        // them comes after every equal tag, as a newer id does. Pending runs, by their start.
        let mine = (key(by), who.run_id.to_string());
        let eligible = match lane.eligible.contains(&mine) {
            true => lane.eligible.range(..&mine).count(),
            false => lane.eligible.range(..(key(by) + 1, String::new())).count(),
        };
        let own = self.entries.get(who.run_id).is_some_and(|e| {
            lane.pending
                .contains(&(key(e.from), who.run_id.to_string()))
        });
        let pending = lane.pending.range(..(key(by), String::new())).count() - usize::from(own);
        let before = eligible + pending;
        let earlier: usize = self.lanes[..l]
            .iter()
            .map(|q| q.eligible.len() + q.pending.len())
            .sum();
        (before + earlier) as u64
    }

    /// The run next in line and the tokens it asked for, left in line; runs past their deadline
    /// that come up are dropped on the way.
    pub(crate) fn head(&mut self, now_ms: u64) -> Option<(String, u32)> {
        loop {
            let l = (0..2).find(|&l| {
                !self.lanes[l].eligible.is_empty() || !self.lanes[l].pending.is_empty()
            })?;
            let lane = &mut self.lanes[l];
            // Eligible by the virtual time this slot brings (see `pop`).
            let v = key(lane.next_v());
            while let Some(first) = lane.pending.first().cloned()
                && first.0 <= v
            {
                lane.pending.remove(&first);
                let by = self.entries.get(&first.1).map_or(0.0, |e| e.by);
                lane.eligible.insert((key(by), first.1));
            }
            // (Nobody eligible, after tenants left owed: the earliest start goes, as no slot
            // is left unused.)
            let (_, run) = lane
                .eligible
                .first()
                .or_else(|| lane.pending.first())
                .cloned()?;
            let entry = self.entries.get(&run)?;
            if entry.deadline_ms > now_ms {
                return Some((run, entry.tokens));
            }
            self.remove(&run);
        }
    }

    /// The run next in line takes its slot: virtual time moves on by the slot, shared by the
    /// weights waiting.
    pub(crate) fn pop(&mut self, run_id: &str) {
        if let Some(e) = self.entries.get(run_id) {
            let lane = &mut self.lanes[e.lane];
            lane.v = lane.next_v();
        }
        self.remove(run_id);
    }

    /// Record `run_id`'s slot, valid until `until_ms`, counted in `window` for `tenant`.
    pub(crate) fn grant(&mut self, run_id: String, tenant: &str, until_ms: u64, window: u64) {
        if self.shares.0 != window {
            self.shares = (window, HashMap::new());
        }
        *self.shares.1.entry(tenant.to_string()).or_default() += 1;
        self.grants.insert(run_id.clone(), until_ms);
        self.untold.push(run_id);
    }

    /// The runs granted a slot since the last call.
    pub(crate) fn tell(&mut self) -> Vec<String> {
        std::mem::take(&mut self.untold)
    }

    /// `run_id` knows of its slot already.
    pub(crate) fn untell(&mut self, run_id: &str) {
        self.untold.retain(|r| r != run_id);
    }

    pub(crate) fn has_untold(&self) -> bool {
        !self.untold.is_empty()
    }

    /// `run_id` will not use its slot: says whether it held a usable one (to be given back).
    pub(crate) fn forget(&mut self, run_id: &str, now_ms: u64) -> bool {
        self.untell(run_id);
        self.grants
            .remove(run_id)
            .is_some_and(|until| until > now_ms)
    }

    /// Each tenant's slots in `window` (granted through the queue).
    pub(crate) fn shares(&self, window: u64) -> Vec<(String, u32)> {
        if self.shares.0 != window {
            return Vec::new();
        }
        let mut shares: Vec<_> = self.shares.1.iter().map(|(t, n)| (t.clone(), *n)).collect();
        shares.sort();
        shares
    }

    /// The tenant of a waiting run.
    pub(crate) fn tenant_of(&self, run_id: &str) -> Option<&str> {
        self.entries.get(run_id).map(|e| e.tenant.as_str())
    }

    /// Take `run_id` out of its lane; says whether it was waiting.
    pub(crate) fn remove(&mut self, run_id: &str) -> bool {
        let Some(e) = self.entries.remove(run_id) else {
            return false;
        };
        let lane = &mut self.lanes[e.lane];
        lane.eligible.remove(&(key(e.by), run_id.to_string()));
        lane.pending.remove(&(key(e.from), run_id.to_string()));
        if let Some(t) = lane.tenants.get_mut(&e.tenant) {
            t.waiting -= 1;
            if t.waiting == 0 {
                lane.weights -= f64::from(t.weight);
            }
        }
        true
    }
}
