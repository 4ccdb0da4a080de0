//! A file size limit (`ulimit -f`, `prlimit --fsize`) reached raises SIGXFSZ, which ends a
//! process by default. Every process that writes the store handles it instead, so such a write
//! fails (EFBIG) like one on a full disk: the request is answered 503, `/healthz` says the store
//! failed, runs in flight keep their answers, and writes work again once there is room.

/// SIGXFSZ's number on Linux.
const SIGXFSZ: i32 = 25;

/// Handle SIGXFSZ for as long as the returned handler lives (the process's lifetime); `None`
/// where it cannot be handled. Call it inside the runtime.
pub fn survive_file_size_limit() -> Option<tokio::signal::unix::Signal> {
    let handler = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(SIGXFSZ));
    match handler {
        Ok(handler) => Some(handler),
        Err(error) => {
            tracing::warn!(%error, "cannot handle SIGXFSZ: a file size limit will end the process");
            None
        }
    }
}
