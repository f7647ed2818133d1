//! `X-LQL-Session`: named LQL sessions, one connection each, so that a client's overlays
//! (INSERT/DELETE/UPDATE, patches) persist across its requests and never reach another
//! client. Bounded in number: the least recently used session is dropped past the limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lql::{Connection, Database};

use crate::error::ApiError;

/// The sessions of one server.
pub struct Sessions {
    map: Mutex<HashMap<String, (Arc<Connection>, Instant)>>,
    limit: usize,
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
    pub fn new(limit: usize) -> Sessions {
        Sessions {
            map: Mutex::new(HashMap::new()),
            limit: limit.max(1),
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
        if map.len() >= self.limit {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
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
