//! `X-LQL-Session`: named LQL sessions, one connection each, so that a client's overlays
//! (INSERT/DELETE/UPDATE, patches) persist across its requests and never reach another
//! client. Bounded in number: past the limit the least recently used idle session is
//! dropped (never one whose statement is running: with every session busy, a new one is
//! answered 503).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lql::{Connection, Database};

use crate::error::ApiError;

/// The sessions of one server.
pub struct Sessions {
    map: Mutex<HashMap<String, (Arc<Connection>, Instant)>>,
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
        if !valid_id(id) {
            return Err(ApiError::invalid_param(
                "X-LQL-Session",
                "X-LQL-Session must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '-', '.'",
            ));
        }
        let mut map = self
            .map
            .lock()
            .map_err(|_| ApiError::internal("session table poisoned"))?;
        if let Some((c, t)) = map.get_mut(id) {
            *t = Instant::now();
            return Ok(c.clone());
        }
        crate::memory::check(self.max_memory)?;
        if map.len() >= self.limit {
            // The least recently used session that no request is using: a session whose
            // statement is running (its connection held by that request too) is never
            // dropped under it. When every session is busy, the new one is refused.
            let idle = map
                .iter()
                .filter(|(_, (c, _))| Arc::strong_count(c) == 1)
                .min_by_key(|(_, (_, t))| *t)
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
        map.insert(id.to_string(), (conn.clone(), Instant::now()));
        Ok(conn)
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
