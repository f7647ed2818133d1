//! `OpenFlags`: how a database may be used, as rusqlite's `OpenFlags` says it for SQLite.
//!
//! - [`OpenFlags::OFFLINE`]: nothing is downloaded; binding a catalogue model that is not in
//!   the cache intact is refused with one error naming the cache path (code `LQL-E0401`).
//! - [`OpenFlags::READ_ONLY`]: statements that write files or edit the model state
//!   (INSERT/DELETE/UPDATE, patches, EXTRACT, COMPILE, COMPACT, DIFF … INTO, RUN STAGE,
//!   TRACE … SAVE) are refused before they run, with code `LQL-E0204`; the list is
//!   `lql_planner::writes`.
//!
//! ```no_run
//! use lql::{Connection, OpenFlags};
//! let conn = Connection::open_with_flags(
//!     "smollm2-135m-instruct",
//!     OpenFlags::OFFLINE | OpenFlags::READ_ONLY,
//! )?;
//! assert_eq!(conn.execute("SAVE PATCH").unwrap_err().code(), "LQL-E0204");
//! # Ok::<(), lql::Error>(())
//! ```

use std::ops::{BitOr, BitOrAssign};

/// A set of options for opening a [`crate::Database`] or [`crate::Connection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OpenFlags(u32);

impl OpenFlags {
    /// No option: downloads allowed, every statement allowed.
    pub const NONE: OpenFlags = OpenFlags(0);
    /// Never download a catalogue model.
    pub const OFFLINE: OpenFlags = OpenFlags(1);
    /// Refuse statements that write files or edit the model state.
    pub const READ_ONLY: OpenFlags = OpenFlags(2);

    /// Whether every option of `other` is set.
    pub fn contains(self, other: OpenFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for OpenFlags {
    type Output = OpenFlags;
    fn bitor(self, o: OpenFlags) -> OpenFlags {
        OpenFlags(self.0 | o.0)
    }
}

impl BitOrAssign for OpenFlags {
    fn bitor_assign(&mut self, o: OpenFlags) {
        self.0 |= o.0;
    }
}

#[cfg(test)]
mod tests {
    use super::OpenFlags;

    #[test]
    fn flags_combine() {
        let f = OpenFlags::OFFLINE | OpenFlags::READ_ONLY;
        assert!(f.contains(OpenFlags::OFFLINE) && f.contains(OpenFlags::READ_ONLY));
        assert!(!OpenFlags::OFFLINE.contains(OpenFlags::READ_ONLY));
        assert!(OpenFlags::default().contains(OpenFlags::NONE));
    }
}
