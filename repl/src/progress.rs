//! Progress bars (indicatif, on stderr) for the connection's progress reports: model
//! downloads, EXTRACT, COMPILE. When stderr is not a terminal the bar is hidden and each
//! task is announced by one plain line instead, so logs still say what took the time.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lql::{Progress, ProgressUnit};

/// Returns a handler drawing one bar per task.
pub fn handler() -> impl Fn(&Progress) + Send + Sync + 'static {
    let bar: Mutex<Option<(String, ProgressBar)>> = Mutex::new(None);
    move |p: &Progress| {
        let Ok(mut slot) = bar.lock() else { return };
        let same = matches!(&*slot, Some((task, _)) if *task == p.task);
        if !same {
            if let Some((_, old)) = slot.take() {
                old.finish_and_clear();
            }
            if !std::io::stderr().is_terminal() {
                eprintln!("{} …", p.task);
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
