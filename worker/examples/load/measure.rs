//! Cheap readings of where the time goes: CPU seconds of Redis (its `INFO`), of each worker
//! process and of the simulator's thread (`/proc`), and Redis commands processed. On a 2-core
//! machine shared with other work these say more than any single rate.

use crate::args::{Args, BoxError};
use freeway::connect::RedisConnection;
use std::collections::BTreeMap;

/// Linux's USER_HZ, the unit of /proc's CPU times: 100 on every mainstream architecture.
const TICKS_PER_S: f64 = 100.0;

pub(crate) async fn header(args: &Args) -> Result<(), BoxError> {
    let mut conn = freeway::connect::redis(&args.redis_url).await?;
    let info = infos(&mut conn, "server").await?.swap_remove(0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "freeway load benchmark: {cores} cores, load average {}, redis {} at {} (its CPU and \
         command counts are server-wide)",
        load_average(),
        field(&info, "redis_version").unwrap_or("?"),
        freeway::connect::redact(&args.redis_url)
    );
    Ok(())
}

/// The 1, 5 and 15 minute load averages.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// CPU and command counters at one moment; subtract two to get a phase's share.
pub(crate) struct Snapshot {
    redis_cpu_s: f64,
    redis_commands: u64,
    workers_cpu_s: Vec<f64>,
    /// The workers' CPU seconds by thread name, summed over the workers, since they started.
    worker_threads: BTreeMap<String, f64>,
    sim_cpu_s: f64,
    this_cpu_s: f64,
    /// Every `postgres` process on the machine (the server-wide cost of a PostgreSQL store).
    postgres_cpu_s: f64,
}

impl Snapshot {
    pub(crate) async fn take(
        conn: &mut RedisConnection,
        workers: &[u32],
        sim_tid: Option<u32>,
    ) -> Result<Snapshot, BoxError> {
        let cpu = infos(conn, "cpu").await?;
        let stats = infos(conn, "stats").await?;
        let num = |text: &str, name| field(text, name).and_then(|v| v.parse::<f64>().ok());
        let sum = |texts: &[String], name| texts.iter().filter_map(|t| num(t, name)).sum::<f64>();
        Ok(Snapshot {
            redis_cpu_s: sum(&cpu, "used_cpu_user") + sum(&cpu, "used_cpu_sys"),
            redis_commands: sum(&stats, "total_commands_processed") as u64,
            workers_cpu_s: workers
                .iter()
                .map(|pid| cpu_s(&format!("/proc/{pid}/stat")).unwrap_or(0.0))
                .collect(),
            worker_threads: workers.iter().fold(BTreeMap::new(), |mut sum, pid| {
                for (name, s) in threads_cpu_s(*pid) {
                    *sum.entry(name).or_default() += s;
                }
                sum
            }),
            sim_cpu_s: sim_tid
                .and_then(|tid| cpu_s(&format!("/proc/self/task/{tid}/stat")))
                .unwrap_or(0.0),
            this_cpu_s: cpu_s("/proc/self/stat").unwrap_or(0.0),
            postgres_cpu_s: postgres_cpu_s(),
        })
    }

    /// CPU seconds per party during the phase, and as a share of one core.
    pub(crate) fn cpu(&self, before: &Snapshot, wall_s: f64) -> String {
        let share = |s: f64| format!("{s:.2} s ({:.0}%)", 100.0 * s / wall_s.max(1e-9));
        let workers: Vec<String> = self
            .workers_cpu_s
            .iter()
            .zip(before.workers_cpu_s.iter().chain(std::iter::repeat(&0.0)))
            .map(|(a, b)| share(a - b))
            .collect();
        let sim = self.sim_cpu_s - before.sim_cpu_s;
        // The sim thread is part of this process: count it once.
        let this = self.this_cpu_s - before.this_cpu_s - sim;
        let mut line = format!(
            "redis {}, this process {}",
            share(self.redis_cpu_s - before.redis_cpu_s),
            share(this)
        );
        if !workers.is_empty() {
            line += &format!(", workers {}", workers.join(" + "));
        }
        let threads: f64 = self.worker_threads.values().sum();
        if threads > 0.0 {
            let mut by_share: Vec<(&String, &f64)> = self.worker_threads.iter().collect();
            by_share.sort_by(|a, b| b.1.total_cmp(a.1));
            let shares: Vec<String> = by_share
                .iter()
                .map(|(name, s)| format!("{name} {:.0}%", 100.0 * **s / threads))
                .collect();
            line += &format!(" [by thread: {}]", shares.join(", "));
        }
        if sim > 0.0 {
            line += &format!(", sim {}", share(sim));
        }
        // An idle server beside a SQLite run is not part of it.
        let postgres = self.postgres_cpu_s - before.postgres_cpu_s;
        if postgres > 0.01 * wall_s {
            line += &format!(", postgres {} (all its processes)", share(postgres));
        }
        line
    }

    /// The pipeline's CPU a run: its workers (a SQLite store runs inside them), Redis (every
    /// node of a cluster) and PostgreSQL, the parties whose cores a fleet pays for. The sim and
    /// this process (the driver) are not counted.
    pub(crate) fn pipeline_per(&self, before: &Snapshot, items: u64) -> String {
        let per = |s: f64| 1000.0 * s / items.max(1) as f64;
        let workers = self.workers_cpu_s(before);
        let redis = self.redis_cpu_s - before.redis_cpu_s;
        let postgres = self.postgres_cpu_s - before.postgres_cpu_s;
        format!(
            "{:.3} ms of CPU a run (workers {:.3}, redis {:.3}, postgres {:.3})",
            per(workers + redis + postgres),
            per(workers),
            per(redis),
            per(postgres)
        )
    }

    /// The worker processes' CPU seconds during the phase, all together.
    pub(crate) fn workers_cpu_s(&self, before: &Snapshot) -> f64 {
        let before: f64 = before.workers_cpu_s.iter().sum();
        self.workers_cpu_s.iter().sum::<f64>() - before
    }

    /// Redis's commands and CPU per item during the phase, and the rate at which Redis alone
    /// would be saturated (it runs commands on one core). Counts every client of the server.
    pub(crate) fn redis_per(&self, before: &Snapshot, items: u64, what: &str) -> String {
        let items = items.max(1) as f64;
        let commands = self.redis_commands.saturating_sub(before.redis_commands) as f64;
        let cpu_ms = 1000.0 * (self.redis_cpu_s - before.redis_cpu_s) / items;
        format!(
            "{:.1} commands and {cpu_ms:.3} ms of Redis CPU per {what}: one Redis core would \
             cap it at ~{} {what}s/s",
            commands / items,
            thousands(1000.0 / cpu_ms.max(1e-6))
        )
    }
}

/// `INFO section` of the server, or of each primary of a cluster (the figures are then the
/// primaries' sums: a replica's CPU and the commands it replays are not counted).
async fn infos(conn: &mut RedisConnection, section: &str) -> Result<Vec<String>, BoxError> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg(section);
    if conn.is_cluster() {
        let by_node: std::collections::HashMap<String, String> = cmd.query_async(conn).await?;
        Ok(by_node.into_values().collect())
    } else {
        Ok(vec![cmd.query_async(conn).await?])
    }
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// CPU seconds of each live thread of `pid`, by thread name; the main thread is `main`.
fn threads_cpu_s(pid: u32) -> Vec<(String, f64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.to_string();
            let name = if tid == pid.to_string() {
                "main".to_string()
            } else {
                std::fs::read_to_string(task.path().join("comm"))
                    .ok()?
                    .trim()
                    .to_string()
            };
            Some((name, cpu_s(task.path().join("stat").to_str()?)?))
        })
        .collect()
}

/// CPU seconds of every process named `postgres` (the server and its backends).
fn postgres_cpu_s() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .filter_map(|e| cpu_s(&e.path().join("stat").to_string_lossy()))
        .sum()
}

/// utime + stime of a `/proc/…/stat` file, in seconds.
pub(crate) fn cpu_s(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name may hold spaces; the fields after it do not. utime and stime are fields
    // 14 and 15, i.e. the 12th and 13th after the name (which is field 2).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / TICKS_PER_S)
}

/// The q-quantile (0..=1) of unsorted values; `None` when there are none.
pub(crate) fn quantile(values: &mut [u64], q: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    Some(values[i])
}

/// `12,345` for a readable rate.
pub(crate) fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
