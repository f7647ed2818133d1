//! The held-out hostile corpus, run through the `lql` binary: every input under
//! `tests/fixtures/hostile/` (built by `storage/tests/hostile_fixtures.rs`) plus the cases
//! that cannot travel through git (symlinks in and out, FIFOs, sparse oversized files, a
//! 100k-tensor safetensors header, planted links at a TRACE target), each run under a
//! 4 GiB address-space limit (`prlimit --as=4294967296`) and a 60 s timeout.
//!
//! Each case asserts: no signal, no abort, no hang, no panic text; and for a refusal, exit
//! status 1 with an error naming the file and the field at fault.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::copy_dir;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hostile")
}

/// What a case expects.
enum Expect {
    /// Refused: exit 1, stderr holds every string.
    Refused(&'static [&'static str]),
    /// Runs to the end (exit 0 or 1 is the statement's business); output holds every
    /// string and none of `absent`.
    Completes(&'static [&'static str], &'static [&'static str]),
    /// Succeeds: exit 0.
    Ok,
}

struct Outcome {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(script: &str) -> Outcome {
    let out = Command::new("timeout")
        .args(["-s", "KILL", "60", "prlimit", "--as=4294967296", "--"])
        .arg(env!("CARGO_BIN_EXE_lql"))
        .args(["-c", script])
        .env("NO_COLOR", "1")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .expect("run lql under timeout and prlimit");
    Outcome {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn check(name: &str, script: &str, expect: Expect) -> Result<(), String> {
    let o = run(script);
    let all = format!("{}\n{}", o.stdout, o.stderr);
    let ctx = || {
        format!(
            "{name}: `{script}`\nexit {:?} signal {:?}\n{all}",
            o.code, o.signal
        )
    };
    if o.signal.is_some() {
        return Err(format!("died on a signal: {}", ctx()));
    }
    match o.code {
        Some(124) | Some(137) => return Err(format!("hung (60 s timeout): {}", ctx())),
        Some(134) | Some(139) | Some(135) => return Err(format!("aborted: {}", ctx())),
        _ => {}
    }
    for bad in [
        "panicked",
        "RUST_BACKTRACE",
        "memory allocation of",
        "internal error",
    ] {
        if all.contains(bad) {
            return Err(format!("{bad:?} in the output: {}", ctx()));
        }
    }
    match expect {
        Expect::Refused(want) => {
            if o.code != Some(1) {
                return Err(format!("expected a refusal (exit 1): {}", ctx()));
            }
            for w in want {
                if !o.stderr.contains(w) {
                    return Err(format!("the error does not name {w:?}: {}", ctx()));
                }
            }
        }
        Expect::Completes(want, absent) => {
            for w in want {
                if !all.contains(w) {
                    return Err(format!("output lacks {w:?}: {}", ctx()));
                }
            }
            for a in absent {
                if all.contains(a) {
                    return Err(format!("output leaks {a:?}: {}", ctx()));
                }
            }
        }
        Expect::Ok => {
            if o.code != Some(0) {
                return Err(format!("expected success: {}", ctx()));
            }
        }
    }
    Ok(())
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn sparse(path: &Path, len: u64) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .unwrap();
    f.set_len(len).unwrap();
}

/// A safetensors file of `n` one-element f32 tensors, written by hand.
fn many_tensors(path: &Path, n: usize) {
    let mut header = String::from("{");
    for i in 0..n {
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"t{i}\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{},{}]}}",
            i * 4,
            i * 4 + 4
        ));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.resize(b.len() + n * 4, 0);
    std::fs::write(path, b).unwrap();
}

fn q(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

#[test]
fn hostile_corpus() {
    let fx = fixtures();
    let t = tempfile::tempdir().unwrap();
    let tmp = t.path();
    let mut cases: Vec<(String, String, Expect)> = Vec::new();
    let mut case = |name: &str, script: String, e: Expect| cases.push((name.into(), script, e));

    // Committed fixtures.
    case(
        "gguf block_count 1e9",
        format!("USE {};", q(&fx.join("layers-1e9.gguf"))),
        Expect::Refused(&["layers-1e9.gguf", "llama.block_count"]),
    );
    case(
        "hf num_hidden_layers 1e9",
        format!("USE {};", q(&fx.join("hf-layers-1e9"))),
        Expect::Refused(&["config.json", "num_hidden_layers"]),
    );
    case(
        "vindex3 n_layers 1e9",
        format!("USE {};", q(&fx.join("layers-1e9.vindex"))),
        Expect::Refused(&["system_graph.json", "n_layers"]),
    );
    case(
        "gguf tensor_count 2^40",
        format!("USE {};", q(&fx.join("tensor-count-2e40.gguf"))),
        Expect::Refused(&["tensor-count-2e40.gguf", "tensor"]),
    );
    case(
        "gguf kv_count u64::MAX",
        format!("USE {};", q(&fx.join("kv-count-max.gguf"))),
        Expect::Refused(&["kv-count-max.gguf", "kv_count"]),
    );
    case(
        "segment header length u64::MAX",
        format!("USE {};", q(&fx.join("huge-segment-header.vindex"))),
        Expect::Refused(&["text.embedding.bin", "header length"]),
    );
    case(
        "segment header length u64::MAX, VERIFY",
        format!("VERIFY {};", q(&fx.join("huge-segment-header.vindex"))),
        Expect::Completes(&["FAILED", "text.embedding.bin"], &[]),
    );
    case(
        "index.json repeated key",
        format!("USE {};", q(&fx.join("duplicate-key.vindex"))),
        Expect::Refused(&["index.json", "duplicate key"]),
    );
    for good in ["tiny.gguf", "hf-small", "small.vindex"] {
        case(
            &format!("good {good}"),
            format!("USE {};", q(&fx.join(good))),
            Expect::Ok,
        );
    }

    // Symlinks out of and inside a container.
    let secret = tmp.join("secret.bin");
    std::fs::write(&secret, b"\x10\x00\x00\x00\x00\x00\x00\x00TOPSECRETBYTES").unwrap();
    let out_c = tmp.join("link-out.vindex");
    copy_dir(&fx.join("small.vindex"), &out_c);
    let seg = out_c.join("segments/text.final_norm.bin");
    std::fs::remove_file(&seg).unwrap();
    std::os::unix::fs::symlink(&secret, &seg).unwrap();
    case(
        "segment symlinked outside",
        format!("USE {};", q(&out_c)),
        Expect::Refused(&["text.final_norm.bin", "outside"]),
    );
    case(
        "segment symlinked outside, VERIFY",
        format!("VERIFY {};", q(&out_c)),
        Expect::Completes(
            &["FAILED", "outside"],
            &["TOPSECRET", "16 bytes", "24 bytes"],
        ),
    );
    let in_c = tmp.join("link-in.vindex");
    copy_dir(&fx.join("small.vindex"), &in_c);
    std::fs::rename(
        in_c.join("segments/text.final_norm.bin"),
        in_c.join("segments/moved.bin"),
    )
    .unwrap();
    std::os::unix::fs::symlink("moved.bin", in_c.join("segments/text.final_norm.bin")).unwrap();
    case(
        "segment symlinked inside",
        format!("USE {};", q(&in_c)),
        Expect::Ok,
    );
    let hf_out = tmp.join("hf-link-out");
    copy_dir(&fx.join("hf-small"), &hf_out);
    std::fs::rename(hf_out.join("model.safetensors"), tmp.join("w.safetensors")).unwrap();
    std::os::unix::fs::symlink(tmp.join("w.safetensors"), hf_out.join("model.safetensors"))
        .unwrap();
    case(
        "hf weights symlinked outside",
        format!("USE {};", q(&hf_out)),
        Expect::Refused(&["model.safetensors", "outside"]),
    );

    // FIFOs.
    let fifo_model = tmp.join("pipe.gguf");
    mkfifo(&fifo_model);
    case(
        "FIFO model file",
        format!("USE {};", q(&fifo_model)),
        Expect::Refused(&["pipe.gguf", "named pipe"]),
    );
    let fifo_c = tmp.join("fifo-seg.vindex");
    copy_dir(&fx.join("small.vindex"), &fifo_c);
    std::fs::remove_file(fifo_c.join("segments/text.final_norm.bin")).unwrap();
    mkfifo(&fifo_c.join("segments/text.final_norm.bin"));
    case(
        "FIFO segment",
        format!("USE {};", q(&fifo_c)),
        Expect::Refused(&["text.final_norm.bin", "named pipe"]),
    );
    case(
        "FIFO segment, VERIFY",
        format!("VERIFY {};", q(&fifo_c)),
        Expect::Completes(&["FAILED", "named pipe"], &[]),
    );
    let fifo_g = tmp.join("fifo-graph.vindex");
    copy_dir(&fx.join("small.vindex"), &fifo_g);
    std::fs::remove_file(fifo_g.join("system_graph.json")).unwrap();
    mkfifo(&fifo_g.join("system_graph.json"));
    case(
        "FIFO graph",
        format!("USE {};", q(&fifo_g)),
        Expect::Refused(&["system_graph.json", "named pipe"]),
    );
    let fifo_cfg = tmp.join("hf-fifo-config");
    copy_dir(&fx.join("hf-small"), &fifo_cfg);
    std::fs::remove_file(fifo_cfg.join("config.json")).unwrap();
    mkfifo(&fifo_cfg.join("config.json"));
    case(
        "FIFO config.json",
        format!("USE {};", q(&fifo_cfg)),
        Expect::Refused(&["config.json", "named pipe"]),
    );
    let fifo_tok = tmp.join("hf-fifo-tokenizer");
    copy_dir(&fx.join("hf-small"), &fifo_tok);
    mkfifo(&fifo_tok.join("tokenizer.json"));
    case(
        "FIFO tokenizer.json",
        format!("USE {};", q(&fifo_tok)),
        Expect::Refused(&["tokenizer.json", "named pipe"]),
    );

    // Oversized files (sparse: nothing may be read).
    let big_cfg = tmp.join("hf-big-config");
    copy_dir(&fx.join("hf-small"), &big_cfg);
    sparse(&big_cfg.join("config.json"), 3 << 30);
    case(
        "3 GB config.json",
        format!("USE {};", q(&big_cfg)),
        Expect::Refused(&["config.json", "limit"]),
    );
    let big_tok = tmp.join("hf-big-tokenizer");
    copy_dir(&fx.join("hf-small"), &big_tok);
    sparse(&big_tok.join("tokenizer.json"), 3 << 30);
    case(
        "3 GB tokenizer.json",
        format!("USE {};", q(&big_tok)),
        Expect::Refused(&["tokenizer.json", "limit"]),
    );
    let big_idx = tmp.join("big-index.vindex");
    copy_dir(&fx.join("small.vindex"), &big_idx);
    sparse(&big_idx.join("index.json"), 3 << 30);
    case(
        "3 GB index.json",
        format!("USE {};", q(&big_idx)),
        Expect::Refused(&["index.json", "limit"]),
    );

    // A safetensors header with 100,000 tensors.
    let many = tmp.join("hf-100k");
    copy_dir(&fx.join("hf-small"), &many);
    many_tensors(&many.join("model.safetensors"), 100_000);
    case(
        "100k-tensor safetensors header",
        format!("USE {};", q(&many)),
        Expect::Refused(&["model.safetensors", "t0"]),
    );

    // TRACE SAVE onto a symlink, a directory and a device: refused, nothing replaced.
    let victim = tmp.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let link = tmp.join("out.trace");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    // TRACE needs a working tokenizer: the real default model (from the catalogue cache).
    let tiny = "MODEL \"smollm2-135m-instruct\"".to_string();
    case(
        "TRACE SAVE onto a symlink",
        format!("USE {tiny}; TRACE \"ab\" SAVE {};", q(&link)),
        Expect::Refused(&["out.trace", "symbolic link"]),
    );
    case(
        "TRACE SAVE onto a directory",
        format!("USE {tiny}; TRACE \"ab\" SAVE {};", q(tmp)),
        Expect::Refused(&["directory"]),
    );
    case(
        "TRACE SAVE onto a device",
        format!("USE {tiny}; TRACE \"ab\" SAVE \"/dev/null\";"),
        Expect::Refused(&["/dev/null", "character device"]),
    );

    let mut failures = Vec::new();
    let n = cases.len();
    for (name, script, expect) in cases {
        if let Err(e) = check(&name, &script, expect) {
            failures.push(e);
        }
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"keep",
        "TRACE wrote through a symlink"
    );
    {
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
    }
    assert!(
        failures.is_empty(),
        "{} of {n} hostile cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
