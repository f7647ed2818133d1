//! The server's memory bound (`--max-memory BYTES`): before a request that runs the
//! model takes a slot, and before a new `X-LQL-Session` is made, the process's resident
//! memory is read; at or above the bound the request is answered 503 `memory_limit`
//! instead of growing further (`/health`, `/metrics` and `/v1/models` always answer).

use crate::error::ApiError;

/// The process's resident set in bytes (Linux `/proc/self/statm`; `None` elsewhere).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the running system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|p| *p > 0).unwrap_or(4096))
}

/// `Ok` below `limit` (or without one); 503 at or above it.
pub fn check(limit: Option<u64>) -> Result<(), ApiError> {
    let Some(limit) = limit else { return Ok(()) };
    match resident_bytes() {
        Some(used) if used >= limit => Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "memory_limit",
            format!(
                "the server holds {} MiB, at its --max-memory bound of {} MiB; retry later",
                used >> 20,
                limit >> 20
            ),
        )),
        _ => Ok(()),
    }
}

/// `4096`, `512M`, `8G` (binary units) as bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{s:?} is not a size (bytes, or a number with K, M or G)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_the_bound_refuses() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("8g"), Ok(8 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
        assert!(check(None).is_ok());
        assert!(resident_bytes().is_some_and(|b| b > 0));
        let e = check(Some(1)).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(check(Some(u64::MAX)).is_ok());
    }
}
