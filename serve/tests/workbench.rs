//! The workbench (`lql serve`'s browser UI): its routes and flags over HTTP, and a real
//! headless Chromium driving every page against a running server
//! (`tests/browser/workbench_check.py`, Selenium with Debian's `chromium` and
//! `chromedriver`), comparing what the pages show with the statements' results over
//! `/v1/lql` and saving a screenshot of each page under `target/workbench-screenshots/`.
//! The browser test skips with a note when Chromium, chromedriver or Selenium is missing,
//! and fails under `CI=true` (where `.ci/run` installs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn the_workbench_is_served_offline_without_the_api_key_and_off_under_no_ui() {
    let mut c = common::config();
    c.api_key = Some("k".into());
    let s = common::start(c);
    let client = common::client();
    for path in [
        "/",
        "/feature/20:412",
        "/trace",
        "/attention",
        "/edit",
        "/ui/app.js",
        "/ui/style.css",
    ] {
        let r = client.get(format!("{}{path}", s.url())).send().unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        let body = r.text().unwrap();
        // Offline: the page loads nothing from another origin.
        assert!(
            !body.contains("https://") && !body.contains("http://"),
            "{path} names another origin"
        );
    }
    // The data stays behind the key.
    let r = client
        .post(format!("{}/v1/lql", s.url()))
        .body("SHOW TABLES")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = client
        .get(format!("{}/ui/../v1/models", s.url()))
        .send()
        .unwrap();
    assert_ne!(r.status().as_u16(), 200);
    let settings: serde_json::Value = client
        .get(format!("{}/ui/settings.json", s.url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(settings["read_only"], false);

    let mut c = common::config();
    c.ui = false;
    let s = common::start(c);
    for path in ["/", "/feature/20:412", "/ui/app.js", "/ui/settings.json"] {
        let r = client.get(format!("{}{path}", s.url())).send().unwrap();
        assert_eq!(r.status().as_u16(), 404, "{path} under --no-ui");
    }
}

#[test]
fn a_session_reports_its_running_statements_progress() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("progress-corpus.txt");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus.txt"),
        &corpus,
    )
    .unwrap();
    let mut c = common::config();
    c.allow_writes = Some(dir.path().to_path_buf());
    let s = common::start(c);
    let url = s.url();
    let client = common::client();
    // Progress is kept per session.
    let r = client.get(format!("{url}/v1/lql/progress")).send().unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let progress = |session: &str| -> serde_json::Value {
        client
            .get(format!("{url}/v1/lql/progress"))
            .header("X-LQL-Session", session)
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    assert_eq!(progress("never-used")["progress"], serde_json::Value::Null);
    let statement = format!(
        "ANALYZE FEATURES FROM {} LAYERS 29-29 TOP 2",
        lql::quote(&corpus.display().to_string())
    );
    let running = {
        let url = url.clone();
        std::thread::spawn(move || {
            common::client()
                .post(format!("{url}/v1/lql"))
                .header("X-LQL-Session", "p1")
                .header("Content-Type", "text/plain")
                .body(statement)
                .send()
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let mut seen = Vec::new();
    while !running.is_finished() {
        let p = progress("p1")["progress"].clone();
        if !p.is_null() && p["finished"] == false {
            seen.push(p);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(running.join().unwrap(), 200);
    assert!(
        !seen.is_empty(),
        "no progress report was seen while the statement ran"
    );
    for p in &seen {
        assert!(
            p["task"].as_str().unwrap().starts_with("ANALYZE FEATURES"),
            "{p}"
        );
        assert!(p["done"].as_u64() <= p["total"].as_u64(), "{p}");
        assert_eq!(p["unit"], "items");
    }
    let last = progress("p1")["progress"].clone();
    assert_eq!(last["finished"], true, "{last}");
    assert_eq!(last["done"], last["total"]);
}

fn screenshots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("workbench-screenshots")
}

/// Why the browser test cannot run here, if it cannot.
fn missing_browser(python: &str) -> Option<String> {
    for (what, path) in [
        (
            "chromium",
            std::env::var("LQL_CHROMIUM").unwrap_or("/usr/bin/chromium".into()),
        ),
        (
            "chromedriver",
            std::env::var("LQL_CHROMEDRIVER").unwrap_or("/usr/bin/chromedriver".into()),
        ),
    ] {
        if !Path::new(&path).exists() {
            return Some(format!(
                "{what} is not at {path} (apt-get install chromium chromium-driver)"
            ));
        }
    }
    let selenium = Command::new(python)
        .args(["-c", "import selenium"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!selenium).then(|| format!("`{python} -c 'import selenium'` fails (pip install selenium)"))
}

#[test]
fn every_workbench_page_works_in_a_real_browser_and_shows_the_statements_values() {
    let python = std::env::var("LQL_BROWSER_PYTHON").unwrap_or("python3".into());
    if let Some(why) = missing_browser(&python) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the browser test cannot run under CI=true: {why}"
        );
        eprintln!("note: SKIPPED the workbench browser test: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus.txt"),
        &corpus,
    )
    .unwrap();
    let corpus = corpus.display().to_string();
    let mut c = common::config();
    c.allow_writes = Some(dir.path().to_path_buf());
    let s = common::start(c);
    // The corpus statistics the feature page reads, computed through the server.
    let (status, v) = common::post(
        &format!("{}/v1/lql", s.url()),
        serde_json::json!({"statements": format!("ANALYZE FEATURES FROM {} LAYERS 20-22", lql::quote(&corpus))}),
    );
    assert_eq!(status, 200, "{v}");
    let mut c = common::config();
    c.read_only = true;
    let read_only = common::start(c);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/browser/workbench_check.py"
    );
    let shots = screenshots_dir();
    let out = Command::new(&python)
        .args([
            script,
            &s.url(),
            &read_only.url(),
            &corpus,
            &shots.display().to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the workbench browser check failed");
    assert!(stdout.contains(" passed, 0 failed"));
    for page in [
        "console",
        "feature",
        "trace",
        "attention",
        "edit",
        "edit-read-only",
    ] {
        assert!(
            shots.join(format!("{page}.png")).exists(),
            "no screenshot of {page}"
        );
    }
}
