//! The lock file beside a SQLite database (`<database>-lock`): an exclusive `flock` for what
//! SQLite's own locking does badly between processes.
//!
//! - Migrations: sqlx's migrator takes no lock on SQLite, so two processes starting at once would
//!   both apply the same migration and one would fail. They hold this lock while migrating.
//! - Batches of writes: SQLite makes a writer that finds the file locked sleep and retry (1, 2,
//!   5, 10 ms and longer), so with several worker processes on one file the one that just
//!   committed takes the lock again before the sleeper wakes, and the sleepers' runs wait. Each
//!   process's writer holds this lock around its transaction instead: the kernel wakes the next
//!   waiter the moment it is released.
//!
//! The lock is released when its holder drops it or the process dies.

use super::StoreError;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The open lock file; [`FileLock::lock`] waits for the lock.
pub(super) struct FileLock {
    file: Arc<File>,
    path: PathBuf,
}

/// The lock, held until dropped.
pub(super) struct Held {
    file: Arc<File>,
}

impl FileLock {
    /// Open (create) `<database>-lock`; the error says what failed.
    pub(super) fn open(database: &Path) -> Result<FileLock, String> {
        let path = lock_path(database);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        Ok(FileLock {
            file: Arc::new(file),
            path,
        })
    }

    /// Take the lock when it is free, else wait for it off the async runtime's threads.
    pub(super) async fn lock(&self) -> Result<Held, StoreError> {
        let file = self.file.clone();
        let failed = |why: String| {
            StoreError::Unavailable(format!("cannot lock {}: {why}", self.path.display()))
        };
        match file.try_lock() {
            Ok(()) => return Ok(Held { file }),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(failed(e.to_string())),
        }
        tokio::task::spawn_blocking(move || file.lock().map(|()| file))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map(|file| Held { file })
            .map_err(|e| failed(e.to_string()))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Closing the file would release it too, but the file stays open for the next batch.
        let _ = self.file.unlock();
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
    fn the_lock_sits_beside_the_database() {
        assert_eq!(
            lock_path(Path::new("/tmp/x/freeway.db")),
            PathBuf::from("/tmp/x/freeway.db-lock")
        );
    }

    #[tokio::test]
    async fn a_second_holder_waits_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("freeway-lock-{}", ulid::Ulid::generate()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("freeway.db");
        let (first, second) = (FileLock::open(&db).unwrap(), FileLock::open(&db).unwrap());
        let held = first.lock().await.unwrap();
        let waiting = tokio::spawn(async move { second.lock().await.map(|_| ()) });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the lock is held");
        drop(held);
        waiting.await.unwrap().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
