//! The migrations of `migrations/`, compiled into every binary so a deployed worker needs no
//! source tree. sqlx's migrator takes an advisory lock on PostgreSQL while it works; on SQLite
//! the store holds its [`super::file_lock::FileLock`].

use super::StoreError;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// Every migration as (version, description, SQL), oldest first. A new one is appended here and in
/// `migrations/`; an applied one is never edited (its checksum is recorded).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "store", include_str!("../../migrations/0001_store.sql")),
    (2, "board", include_str!("../../migrations/0002_board.sql")),
    (
        3,
        "run_jobs",
        include_str!("../../migrations/0003_run_jobs.sql"),
    ),
    (
        4,
        "store_probe",
        include_str!("../../migrations/0004_store_probe.sql"),
    ),
    (
        5,
        "turn_fields",
        include_str!("../../migrations/0005_turn_fields.sql"),
    ),
    (
        6,
        "canaries",
        include_str!("../../migrations/0006_canaries.sql"),
    ),
    (
        7,
        "retry_of",
        include_str!("../../migrations/0007_retry_of.sql"),
    ),
    (
        8,
        "unused_run_indexes",
        include_str!("../../migrations/0008_unused_run_indexes.sql"),
    ),
    (
        9,
        "tenants",
        include_str!("../../migrations/0009_tenants.sql"),
    ),
    (10, "audit", include_str!("../../migrations/0010_audit.sql")),
    (
        11,
        "one_run_per_key",
        include_str!("../../migrations/0011_one_run_per_key.sql"),
    ),
];

pub(super) fn migrator() -> Migrator {
    let migrations = MIGRATIONS
        .iter()
        .map(|(version, description, sql)| {
            Migration::new(
                *version,
                (*description).into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    // Migrations are additive, so a binary one release older still runs against a newer schema
    // while a rolling deploy replaces it.
    migrator.set_ignore_missing(true);
    migrator
}

pub(super) fn migrate_error(e: sqlx::migrate::MigrateError) -> StoreError {
    StoreError::Migrate(super::sql::db::one_line(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const PINNED: [(i64, u64); 11] = [
        (1, 0xe69cb70d1b7d5fbf),
        (2, 0x8a2f765eeb19a40e),
        (3, 0xd7ae84a71a3089de),
        (4, 0x692db48c8c99cdc3),
        (5, 0x191c380e2c5cacb0),
        (7, 0xb7dca67c62254b70),
        (6, 0x9def6c565ac5b24e),
        (8, 0x75e6eae18d9b0785),
        (9, 0x95e7dce655e6adf2),
        (10, 0x3fbbcccbe9c81455),
        (11, 0x920e75599997d574),
    ];

    /// FNV-1a: a fingerprint of a migration's text, enough to notice an edit.
    fn fingerprint(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// sqlx records each applied migration's checksum and refuses to start against a database
    /// whose migration text changed, even in a comment: deployed stores would stop opening.
    #[test]
    fn applied_migrations_are_never_edited() {
        let pinned: &[(i64, u64)] = &PINNED;
        for (version, _, sql) in MIGRATIONS {
            let Some((_, expected)) = pinned.iter().find(|(v, _)| v == version) else {
                panic!(
                    "pin migration {version}: ({version}, {:#x})",
                    fingerprint(sql)
                );
            };
            assert_eq!(
                fingerprint(sql),
                *expected,
                "migration {version} was edited: add a new migration instead"
            );
        }
    }

    #[test]
    fn versions_are_unique_and_ascending() {
        let versions: Vec<i64> = MIGRATIONS.iter().map(|m| m.0).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    }

    #[test]
    fn every_file_of_the_folder_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let embedded: Vec<String> = MIGRATIONS
            .iter()
            .map(|(v, d, _)| format!("{v:04}_{d}.sql"))
            .collect();
        assert_eq!(files, embedded);
    }
}
