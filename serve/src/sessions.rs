//! `X-LQL-Session`: named LQL sessions, one connection each, so that a client's overlays
//! (INSERT/DELETE/UPDATE, patches) persist across its requests and never reach another
//! client. Bounded in number: past the limit the least recently used idle session is
//! dropped (never one whose statement is running: with every session busy, a new one is
//! answered 503). Each session keeps the last progress report of its running statement
//! (`GET /v1/lql/progress`), so a client can show a long statement's progress while it runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lql::{Connection, Database};

use crate::error::ApiError;

/// The last progress report of a session's statements (shared with its progress handler).
pub type LastProgress = Arc<Mutex<Option<lql::Progress>>>;

/// One session: its connection, when it was last used, its last progress report.
struct Session {
    conn: Arc<Connection>,
    used: Instant,
    progress: LastProgress,
}

/// The sessions of one server.
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    limit: usize,
    /// `--max-memory`: no new session at or above it.
    max_memory: Option<u64>,
}

/// Whether `id` is an acceptable session name: 1–64 of `A-Z a-z 0-9 _ - .`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

fn check_id(id: &str) -> Result<(), ApiError> {
    if valid_id(id) {
        Ok(())
    } else {
        Err(ApiError::invalid_param(
            "X-LQL-Session",
            "X-LQL-Session must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '-', '.'",
        ))
    }
}

impl Sessions {
    pub fn new(limit: usize, max_memory: Option<u64>) -> Sessions {
        Sessions {
            map: Mutex::new(HashMap::new()),
            limit: limit.max(1),
            max_memory,
        }
    }

    /// The connection of session `id`, made on first use.
    pub fn get(&self, db: &Database, id: &str) -> Result<Arc<Connection>, ApiError> {
        check_id(id)?;
        let mut map = self
            .map
            .lock()
            .map_err(|_| ApiError::internal("session table poisoned"))?;
        if let Some(s) = map.get_mut(id) {
            s.used = Instant::now();
            return Ok(s.conn.clone());
        }
        crate::memory::check(self.max_memory)?;
        if map.len() >= self.limit {
            // The least recently used session that no request is using: a session whose
            // statement is running (its connection held by that request too) is never
            // dropped under it. When every session is busy, the new one is refused.
            let idle = map
                .iter()
                .filter(|(_, s)| Arc::strong_count(&s.conn) == 1)
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            match idle {
                Some(oldest) => {
                    map.remove(&oldest);
                }
                None => {
                    return Err(ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "server_error",
                        "sessions_busy",
                        format!(
                            "all {} sessions are running statements; retry when one ends",
                            self.limit
                        ),
                    ))
                }
            }
        }
        let conn = Arc::new(
            db.connect()
                .map_err(|e| ApiError::internal(e.to_string()))?,
        );
        let progress: LastProgress = Arc::default();
        let last = progress.clone();
        conn.set_progress_handler(Some(move |p: &lql::Progress| {
            if let Ok(mut l) = last.lock() {
                *l = Some(p.clone());
            }
        }));
        map.insert(
            id.to_string(),
            Session {
                conn: conn.clone(),
                used: Instant::now(),
                progress,
            },
        );
        Ok(conn)
    }

    /// The last progress report of session `id`'s statements (`None`: none yet, or no such
    /// session). Read without waiting for the session's running statement.
    pub fn progress(&self, id: &str) -> Result<Option<lql::Progress>, ApiError> {
        check_id(id)?;
        let map = self
            .map
            .lock()
            .map_err(|_| ApiError::internal("session table poisoned"))?;
        Ok(map
            .get(id)
            .and_then(|s| s.progress.lock().ok().and_then(|p| p.clone())))
    }

    pub fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session held by a running request is not evicted; with every session busy a new
    /// one is refused, and once a request ends its session can make room.
    #[test]
    fn a_busy_session_is_never_evicted() {
        let db = Database::new();
        let s = Sessions::new(2, None);
        let a = s.get(&db, "a").unwrap();
        let b = s.get(&db, "b").unwrap();
        let Err(e) = s.get(&db, "c") else {
            panic!("a third session while both are busy");
        };
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        drop(a);
        let _c = s.get(&db, "c").unwrap();
        // "b" (still held) survived; "a" made room.
        assert!(Arc::ptr_eq(&b, &s.get(&db, "b").unwrap()));
        assert_eq!(s.len(), 2);
    }
}
