//! Ctrl-C while a statement runs: a SIGINT handler that trips the connection's interrupt
//! handle, so the statement stops and the REPL keeps its session. (While the REPL reads a
//! line, rustyline has the terminal in raw mode and sees Ctrl-C as a key instead.)

use std::sync::OnceLock;

use lql::InterruptHandle;

static HANDLE: OnceLock<InterruptHandle> = OnceLock::new();

extern "C" fn on_sigint(_: libc::c_int) {
    // Async-signal-safe: an atomic load and an atomic store.
    if let Some(h) = HANDLE.get() {
        h.interrupt();
    }
}

/// Installs the handler for this process (the first handle given wins).
pub fn install(handle: InterruptHandle) -> std::io::Result<()> {
    let _ = HANDLE.set(handle);
    // SAFETY: `sigaction` with a zeroed struct, an empty mask and a handler that only
    // touches atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
