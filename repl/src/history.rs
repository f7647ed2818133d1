//! Where the REPL keeps its history: `$LQL_HISTORY`, else `$XDG_STATE_HOME/lql/history`,
//! else `~/.local/state/lql/history`.

use std::path::PathBuf;

pub fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LQL_HISTORY").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|p| !p.is_empty())
                .map(|h| PathBuf::from(h).join(".local").join("state"))
        })?;
    Some(state.join("lql").join("history"))
}
