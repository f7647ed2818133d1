//! The interactive REPL, driven through tmux: a multi-line statement shows a table,
//! `.mode json` switches output, an unknown keyword shows the ariadne error with a caret,
//! Ctrl-C during a long GENERATE returns to the prompt with the session intact, and history
//! survives a restart; a long statement shows a spinner with the elapsed time, tables fit a
//! narrow window with `…`, token spaces are visible, `.tables` lists the tables. Skips (with
//! a note) when tmux is not installed. Run with --release.

use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A tmux server on a private socket, removed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(cmd: &str, socket: &str, width: u16) -> Tmux {
        let t = Tmux {
            socket: socket.to_string(),
        };
        let ok = t
            .cmd(&[
                "new-session",
                "-d",
                "-s",
                "lql",
                "-x",
                &width.to_string(),
                "-y",
                "60",
                cmd,
            ])
            .status
            .success();
        assert!(ok, "tmux new-session failed");
        t
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "lql"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    /// Types literal text (no key-name interpretation). `;` goes as a hex key code: tmux
    /// reads an argument ending in `;` as a command separator.
    fn type_text(&self, text: &str) {
        for (i, part) in text.split(';').enumerate() {
            if i > 0 {
                assert!(self
                    .cmd(&["send-keys", "-t", "lql", "-H", "3b"])
                    .status
                    .success());
            }
            if !part.is_empty() {
                assert!(self
                    .cmd(&["send-keys", "-t", "lql", "-l", part])
                    .status
                    .success());
            }
        }
    }

    fn screen(&self) -> String {
        let o = self.cmd(&["capture-pane", "-p", "-J", "-t", "lql", "-S", "-2000"]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until the screen satisfies `pred` (generous limit: this is not a timing test).
    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            if start.elapsed() > Duration::from_secs(120) {
                panic!("timed out waiting for {what}; screen:\n{s}");
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// Types a dot-command and Enter, and waits for the next prompt: text typed before the
    /// editor has the terminal again can be discarded when it switches to raw mode.
    fn dot_command(&self, line: &str) {
        let before = self.prompts();
        self.type_text(line);
        self.send(&["Enter"]);
        self.wait_for("the prompt after a dot-command", |s| {
            s.matches("lql> ").count() > before
        });
    }

    /// Number of prompts on screen.
    fn prompts(&self) -> usize {
        self.screen().matches("lql> ").count()
    }

    fn clear(&self) {
        self.send(&["C-l"]);
        self.cmd(&["clear-history", "-t", "lql"]);
        sleep(Duration::from_millis(200));
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn launch(history: &Path, socket: &str) -> Tmux {
    launch_with_width(history, socket, 220)
}

fn launch_with_width(history: &Path, socket: &str, width: u16) -> Tmux {
    let cmd = format!(
        "env NO_COLOR=1 LQL_HISTORY={} {} --model smollm2-135m-instruct",
        history.display(),
        env!("CARGO_BIN_EXE_lql")
    );
    let t = Tmux::start(&cmd, socket, width);
    t.wait_for("the first prompt", |s| s.contains("lql> "));
    t
}

#[test]
fn repl_session_through_tmux() {
    if !have_tmux() {
        eprintln!("note: tmux is not installed; skipping the REPL test (apt-get install tmux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let socket = format!("lql-test-{}", std::process::id());
    let t = launch(&history, &socket);

    // A statement over two lines: Enter inside it continues the statement.
    t.type_text("SHOW LAYERS");
    t.send(&["Enter"]);
    t.type_text("  LIKE '1_';");
    t.send(&["Enter"]);
    let s = t.wait_for("the SHOW LAYERS table", |s| {
        s.contains("╰") && s.contains("│    19 ┆")
    });
    assert!(s.contains("attn_encoding"), "{s}");
    assert!(!s.contains("│     9 ┆"), "LIKE '1_' keeps 10-19 only:\n{s}");

    // `.mode json` switches the output.
    t.clear();
    t.dot_command(".mode json");
    t.type_text("SHOW MODELS;");
    t.send(&["Enter"]);
    t.wait_for("a JSON line", |s| {
        s.contains("{\"statement\":\"SHOW MODELS\",\"columns\":[\"name\"")
    });

    // An unknown keyword: the ariadne report with a caret under the word.
    t.clear();
    t.dot_command(".mode table");
    t.type_text("FROBNICATE 'x';");
    t.send(&["Enter"]);
    let s = t.wait_for("the syntax error", |s| s.contains("unknown keyword"));
    let lines: Vec<&str> = s.lines().collect();
    let src = lines
        .iter()
        .rposition(|l| l.contains("│ FROBNICATE 'x';"))
        .unwrap_or_else(|| panic!("source line missing:\n{s}"));
    let col = lines[src].find("FROBNICATE").unwrap();
    let under = lines[src + 1];
    let mark = under
        .find(['┬', '─', '^'])
        .unwrap_or_else(|| panic!("caret missing:\n{s}"));
    assert_eq!(
        under[..mark].chars().count(),
        lines[src][..col].chars().count(),
        "caret not under the keyword:\n{s}"
    );

    // Ctrl-C during a long GENERATE cancels it and keeps the session.
    t.clear();
    let before = t.prompts();
    t.type_text("GENERATE '1, 2, 3, 4, 5, 6, 7,' MAX 4000;");
    t.send(&["Enter"]);
    sleep(Duration::from_secs(2));
    t.send(&["C-c"]);
    let s = t.wait_for("the interrupted error and a new prompt", |s| {
        s.contains("interrupted") && s.matches("lql> ").count() > before
    });
    // The rows made before Ctrl-C are shown, their finish reason `interrupted` (a
    // GENERATE that ended on its own would say `length` or `stop`).
    assert!(
        s.contains("┆ interrupted"),
        "GENERATE finished before Ctrl-C, or its partial row is missing:\n{s}"
    );
    t.type_text("STATS;");
    t.send(&["Enter"]);
    t.wait_for("STATS after the interrupt, then a prompt", |s| {
        s.contains("smollm2-135m-instruct")
            && s.contains("can_execute")
            && s.trim_end().ends_with("lql>")
    });
    // Ctrl-C is a key only once the editor has the terminal again (else it is SIGINT).
    sleep(Duration::from_millis(300));

    // Ctrl-C at the prompt clears the line.
    t.type_text("SHOW MOD");
    t.send(&["C-c"]);
    t.type_text(".quit");
    t.send(&["Enter"]);
    let start = Instant::now();
    while t.cmd(&["has-session", "-t", "lql"]).status.success() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "lql did not quit:\n{}",
            t.screen()
        );
        sleep(Duration::from_millis(100));
    }
    drop(t);

    // History survives a restart: Up recalls the last entry.
    let saved = std::fs::read_to_string(&history).expect("history file written");
    assert!(saved.contains("STATS;"), "{saved}");
    let t = launch(&history, &format!("{socket}-2"));
    t.send(&["Up"]);
    t.wait_for("the recalled entry", |s| s.contains("lql> .quit"));
    t.send(&["Up"]);
    t.wait_for("the entry before it", |s| s.contains("lql> STATS;"));
    t.send(&["C-d"]);
}

#[test]
fn repl_progress_fitting_and_schema_through_tmux() {
    if !have_tmux() {
        eprintln!("note: tmux is not installed; skipping the REPL test (apt-get install tmux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let socket = format!("lql-test-fit-{}", std::process::id());
    let t = launch_with_width(&history, &socket, 80);

    // .tables lists the tables the model answers.
    t.type_text(".tables");
    t.send(&["Enter"]);
    t.wait_for("the table list", |s| {
        s.contains("features  layers  tokens  tensors")
    });

    // A table wider than the window: cells are cut with an ellipsis, rows stay one line.
    t.clear();
    t.type_text("SHOW MODELS;");
    t.send(&["Enter"]);
    let s = t.wait_for("the models table", |s| s.contains("╰"));
    let rows: Vec<&str> = s.lines().filter(|l| l.starts_with('│')).collect();
    let models = lql_storage::catalogue::ENTRIES.len();
    assert_eq!(
        rows.len(),
        1 + models,
        "header and each built-in model, one line each:\n{s}"
    );
    assert!(rows[1].contains('…'), "{s}");
    assert!(s.lines().all(|l| l.chars().count() <= 80), "{s}");

    // Token text keeps its leading space visible.
    t.clear();
    t.type_text("TOKENIZE 'Hello world';");
    t.send(&["Enter"]);
    t.wait_for("the visible space", |s| s.contains("␣world"));

    // A statement running longer than a second shows a spinner with the elapsed time;
    // Ctrl-C cancels it and the statements after it on the line.
    t.clear();
    let before = t.prompts();
    t.type_text("SELECT * FROM features WHERE top_token = 'Paris' LIMIT 1; SHOW MODELS;");
    t.send(&["Enter"]);
    t.wait_for("the spinner", |s| {
        s.contains("running ") && s.contains("(Ctrl-C cancels)")
    });
    t.send(&["C-c"]);
    t.wait_for("the interrupted error and a new prompt", |s| {
        s.contains("interrupted") && s.matches("lql> ").count() > before
    });
    sleep(Duration::from_millis(500));
    let s = t.screen();
    assert!(!s.contains("cached"), "SHOW MODELS ran after Ctrl-C:\n{s}");
    assert!(!s.contains("running "), "the spinner was not erased:\n{s}");
    t.send(&["C-d"]);
}
