//! The migrations of `migrations/`, compiled into every binary so a deployed worker needs no
//! source tree, and the lock that makes concurrent start-ups safe on SQLite.
//!
//! sqlx's migrator takes an advisory lock on PostgreSQL but none on SQLite, where two processes
//! starting at once would both try to apply the same migration and one would fail. SQLite is
//! one machine by construction, so an exclusive `flock` on a file beside the database (`…-lock`)
//! serializes them; it is released when the migration ends or the process dies.

use super::StoreError;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// Every migration as (version, description, SQL), oldest first. A new one is appended here and in
/// `migrations/`; an applied one is never edited (its checksum is recorded).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "store", include_str!("../../migrations/0001_store.sql")),
    (2, "board", include_str!("../../migrations/0002_board.sql")),
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
    StoreError::Migrate(super::sql::one_line(&e.to_string()))
}

/// An exclusive lock on the file beside a SQLite database, held while migrations run.
pub(super) struct MigrationLock {
    _file: File,
}

impl MigrationLock {
    /// Wait for the lock on `<database>-lock`; the error says what failed. Blocking: call it off
    /// the async runtime.
    pub fn acquire(database: &Path) -> Result<MigrationLock, String> {
        let path = lock_path(database);
        let failed = |e: std::io::Error| format!("cannot lock {}: {e}", path.display());
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(failed)?;
        file.lock().map_err(failed)?;
        Ok(MigrationLock { _file: file })
    }
}

fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push("-lock");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_lock_sits_beside_the_database() {
        assert_eq!(
            lock_path(Path::new("/tmp/x/freeway.db")),
            PathBuf::from("/tmp/x/freeway.db-lock")
        );
    }
}
