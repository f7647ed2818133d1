//! Counts of container bytes this thread read through the VINDEX3 module: segment header
//! bytes and segment payload bytes (tensor data, LYRW bank files). The artifact-only
//! answers (INSPECT, DESCRIBE OBJECT, SHOW REPRESENTATIONS, PRECISION, `lql vindex …`)
//! must leave the payload count unchanged; VERIFY moves it by every byte it hashes. Per
//! thread, so concurrent statements (and tests) do not see each other's reads; work that
//! VERIFY fans out to other threads is counted on the calling thread.

use std::cell::Cell;

thread_local! {
    static HEADER: Cell<u64> = const { Cell::new(0) };
    static PAYLOAD: Cell<u64> = const { Cell::new(0) };
}

/// Segment header bytes read by this thread so far.
pub fn header_bytes_read() -> u64 {
    HEADER.with(Cell::get)
}

/// Segment payload bytes read by this thread so far.
pub fn payload_bytes_read() -> u64 {
    PAYLOAD.with(Cell::get)
}

pub(crate) fn count_header(n: u64) {
    HEADER.with(|c| c.set(c.get().saturating_add(n)));
}

pub(crate) fn count_payload(n: u64) {
    PAYLOAD.with(|c| c.set(c.get().saturating_add(n)));
}
