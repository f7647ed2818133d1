//! Crash safety of EXTRACT: the test binary runs one of its own tests as a child that
//! extracts into the directory an environment variable names and prints `READY` just before
//! it starts; the parent kills it (SIGKILL) at spread-out moments and checks what is left.

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

use lql_storage::format::vindex3::{self, open_model, verify};

/// The child side: which test of this binary extracts, and the variable naming its target.
pub struct CrashChild {
    pub test: &'static str,
    pub env: &'static str,
}

/// What the killed runs left behind.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// Directories that open (each also verifies).
    pub complete: usize,
    /// Directories that are refused (never at the target name itself).
    pub refused: usize,
    /// Runs whose target does not exist.
    pub absent: usize,
}

impl CrashChild {
    /// Start the child extracting into `out`; returns it once it printed READY.
    pub fn spawn(&self, out: &Path) -> (Child, Lines<BufReader<ChildStderr>>) {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([self.test, "--exact", "--nocapture", "--test-threads=1"])
            .env(self.env, out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        for l in lines.by_ref() {
            if l.unwrap().trim() == "READY" {
                break;
            }
        }
        (child, lines)
    }

    /// One uninterrupted extract into `out`; its wall time from spawn to exit (used only to
    /// spread the kill points).
    pub fn run_to_end(&self, out: &Path) -> Duration {
        let start = std::time::Instant::now();
        let (mut child, lines) = self.spawn(out);
        for _ in lines {}
        assert!(child.wait().unwrap().success());
        start.elapsed()
    }

    /// `runs` extracts into `dir/run{i}`, each killed at a pseudo-random moment within 1.2×
    /// `full`. Whatever each leaves either opens and verifies, or is refused and is not at
    /// the target name. With `remove`, each run's directories are deleted once checked.
    pub fn kill_runs(&self, dir: &Path, full: Duration, runs: usize, remove: bool) -> Leftovers {
        let mut seed = 0x2545_F491_4F6C_DD1Du64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
        let mut left = Leftovers::default();
        for run in 0..runs {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let delay = full.mul_f64((seed % 1000) as f64 / 1000.0 * 1.2);
            let out = dir.join(format!("run{run}"));
            let (mut child, _lines) = self.spawn(&out);
            std::thread::sleep(delay);
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            // Either the target is absent, or it is complete and verifies; leftover
            // temporary directories are accepted only when complete.
            if !out.exists() {
                left.absent += 1;
            }
            for entry in std::fs::read_dir(dir).unwrap() {
                let p = entry.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                if !name.starts_with(&format!("run{run}")) {
                    continue;
                }
                match open_model(&p) {
                    Ok(_) => {
                        assert!(
                            vindex3::all_ok(&verify(&p).unwrap()),
                            "{name} opens but does not verify"
                        );
                        left.complete += 1;
                    }
                    Err(_) => {
                        assert_ne!(
                            name,
                            format!("run{run}"),
                            "a refused directory at the target"
                        );
                        left.refused += 1;
                    }
                }
                if remove {
                    std::fs::remove_dir_all(&p).unwrap();
                }
            }
        }
        left
    }
}
