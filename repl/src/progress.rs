//! Progress on stderr: bars (indicatif) for the connection's progress reports (model
//! downloads, EXTRACT, COMPILE), and in the interactive shell a spinner with the elapsed
//! time for any statement that runs longer than a second without reports of its own.
//! When stderr is not a terminal a bar is hidden and each task is announced by a plain
//! line, then one at each tenth done (`task: 40% (4/10)`), so logs say what took the time; in the JSON modes nothing is
//! printed, so stderr carries only the one-line JSON errors.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lql::{Progress, ProgressUnit};

/// Returns a handler drawing one bar per task.
pub fn handler() -> impl Fn(&Progress) + Send + Sync + 'static {
    handler_with(Arc::default(), Arc::default())
}

/// Like [`handler`]; it prints nothing while `quiet` is set, and holds `busy` set while a
/// bar is shown.
pub fn handler_with(
    quiet: Arc<AtomicBool>,
    busy: Arc<AtomicBool>,
) -> impl Fn(&Progress) + Send + Sync + 'static {
    let bar: Mutex<Option<(String, ProgressBar)>> = Mutex::new(None);
    // Without a terminal: the tenths of the current task already announced.
    let tenths = Mutex::new(0u64);
    move |p: &Progress| {
        if quiet.load(Ordering::SeqCst) {
            return;
        }
        busy.store(!p.finished, Ordering::SeqCst);
        let Ok(mut slot) = bar.lock() else { return };
        let same = matches!(&*slot, Some((task, _)) if *task == p.task);
        if !same {
            if let Some((_, old)) = slot.take() {
                old.finish_and_clear();
            }
            if !std::io::stderr().is_terminal() {
                eprintln!("{} …", p.task);
                if let Ok(mut t) = tenths.lock() {
                    *t = 0;
                }
            }
            let pb = ProgressBar::with_draw_target(p.total, ProgressDrawTarget::stderr());
            let template = match (p.unit, p.total.is_some()) {
                (ProgressUnit::Bytes, true) => {
                    "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
                }
                (ProgressUnit::Bytes, false) => "{spinner} {msg} {bytes} {bytes_per_sec}",
                (ProgressUnit::Items, true) => "{msg} [{bar:30}] {pos}/{len} eta {eta}",
                (ProgressUnit::Items, false) => "{spinner} {msg} {pos}",
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                pb.set_style(style.progress_chars("=> "));
            }
            pb.set_message(p.task.clone());
            *slot = Some((p.task.clone(), pb));
        }
        // Logs and scripts get a plain line at each tenth of a task that knows its total.
        if let (false, Some(total), Ok(mut t)) =
            (std::io::stderr().is_terminal(), p.total, tenths.lock())
        {
            let now = p.done.saturating_mul(10) / total.max(1);
            if now > *t && !p.finished {
                *t = now;
                eprintln!("{}: {}% ({}/{})", p.task, now * 10, p.done, total);
            }
        }
        if let Some((_, pb)) = &*slot {
            if let Some(t) = p.total {
                pb.set_length(t);
            }
            pb.set_position(p.done);
            if p.finished {
                pb.finish_and_clear();
            }
        }
        if p.finished {
            *slot = None;
        }
    }
}

/// Returns a token-stream handler that shows GENERATE's text live on stderr (dimmed when
/// `color`), and sets `streamed` so the caller ends the line before printing the result.
pub fn token_printer(
    streamed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    color: bool,
) -> impl Fn(&str) + Send + Sync + 'static {
    move |piece: &str| {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = if color {
            write!(err, "\x1b[2m{piece}\x1b[0m")
        } else {
            write!(err, "{piece}")
        };
        let _ = err.flush();
        streamed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A spinner with the elapsed time, drawn on stderr once a statement has run for `delay`;
/// hidden while any of the `quiet` flags is set (a progress bar is up, generated text is
/// streaming). Dropping it stops and erases it.
pub struct Spinner {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Spinner {
    pub fn start(delay: Duration, quiet: Vec<Arc<AtomicBool>>) -> Spinner {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let shared = stop.clone();
        let thread = std::thread::spawn(move || spin(delay, &quiet, &shared));
        Spinner {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        if let Ok(mut done) = lock.lock() {
            *done = true;
        }
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn spin(delay: Duration, quiet: &[Arc<AtomicBool>], stop: &(Mutex<bool>, Condvar)) {
    use std::io::Write;
    const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    if !std::io::stderr().is_terminal() {
        return;
    }
    let started = Instant::now();
    let (lock, cv) = stop;
    let Ok(mut done) = lock.lock() else { return };
    // Drawn by hand (not padded to the terminal's width), so a `^C` the terminal echoes
    // after it stays on the same line and the final erase takes both.
    let mut shown = false;
    let mut wait = delay;
    let mut frame = 0usize;
    loop {
        done = match cv.wait_timeout_while(done, wait, |d| !*d) {
            Ok((d, _)) => d,
            Err(_) => return,
        };
        if *done {
            break;
        }
        wait = Duration::from_millis(100);
        let mut err = std::io::stderr().lock();
        if quiet.iter().any(|q| q.load(Ordering::SeqCst)) {
            if shown {
                let _ = write!(err, "\r\x1b[2K");
                shown = false;
            }
            continue;
        }
        let _ = write!(
            err,
            "\r\x1b[2K{} running {:.1}s (Ctrl-C cancels)",
            FRAMES[frame % FRAMES.len()],
            started.elapsed().as_secs_f64()
        );
        let _ = err.flush();
        frame += 1;
        shown = true;
    }
    if shown {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}
