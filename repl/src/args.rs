//! The command line as sqlite3 and duckdb users type it: sqlite's single-dash long options
//! (`-csv`, `-json`, `-header`, `-bail`, `-cmd X`, …) rewritten to the long options clap
//! parses, and the positional arguments sorted into a model to bind, script files and
//! statements.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One positional argument after the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// An existing file: a script of statements and dot-commands.
    Script(PathBuf),
    /// Statements to run.
    Sql(String),
}

/// Options that take a value: the word after them is left alone.
const TAKES_VALUE: &[&str] = &[
    "-c",
    "--command",
    "-f",
    "--format",
    "-m",
    "--model",
    "--cmd",
    "--nullvalue",
];

/// The long option a sqlite-style single-dash option stands for.
fn sqlite_option(arg: &str) -> Option<&'static [&'static str]> {
    Some(match arg {
        "-csv" => &["--format", "csv"],
        "-json" => &["--format", "array"],
        "-jsonl" => &["--format", "jsonl"],
        "-line" => &["--format", "line"],
        "-markdown" => &["--format", "markdown"],
        "-box" => &["--format", "box"],
        "-table" => &["--format", "table"],
        "-header" | "-headers" => &["--header"],
        "-noheader" | "-noheaders" => &["--no-header"],
        "-bail" => &["--bail"],
        "-echo" => &["--echo"],
        "-cmd" => &["--cmd"],
        "-nullvalue" => &["--nullvalue"],
        "-offline" => &["--offline"],
        "-readonly" => &["--readonly"],
        "-version" => &["--version"],
        "-help" => &["--help"],
        _ => return None,
    })
}

/// Rewrites sqlite's spellings to clap's (`-csv` → `--format csv`), leaving the values of
/// options, everything after `--`, and the `bench` subcommand's arguments untouched.
pub fn normalize(argv: Vec<OsString>) -> Vec<OsString> {
    if argv.get(1).is_some_and(|a| a == "bench") {
        return argv;
    }
    let mut out = Vec::with_capacity(argv.len() + 4);
    let mut iter = argv.into_iter();
    out.extend(iter.next());
    let mut value_next = false;
    let mut rest = false;
    for arg in iter {
        if rest || value_next {
            value_next = false;
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            rest = true;
            out.push(arg);
            continue;
        }
        if let Some(long) = sqlite_option(s) {
            value_next = matches!(s, "-cmd" | "-nullvalue");
            out.extend(long.iter().map(OsString::from));
            continue;
        }
        value_next = TAKES_VALUE.contains(&s);
        out.push(arg);
    }
    out
}

/// Sorts positional arguments: a first argument that is a model is returned apart; each
/// other argument is a script when such a file exists, a "no such file" error when it
/// looks like a path, and statements otherwise.
pub fn classify(args: &[String]) -> Result<(Option<String>, Vec<Input>), String> {
    let mut model = None;
    let mut rest = args;
    if let Some((first, tail)) = args.split_first() {
        if is_model(first) {
            model = Some(first.clone());
            rest = tail;
        }
    }
    let mut inputs = Vec::with_capacity(rest.len());
    for arg in rest {
        let p = Path::new(arg);
        if p.is_dir() {
            return Err(if is_model(arg) {
                format!("{arg}: a model goes first, before statements and scripts")
            } else {
                format!(
                    "{arg}: a folder that is not a model \
                     (it has no index.json, config.json or model-package.json)"
                )
            });
        }
        if p.is_file() {
            if is_model(arg) {
                return Err(format!(
                    "{arg}: a model goes first, before statements and scripts"
                ));
            }
            inputs.push(Input::Script(p.to_path_buf()));
        } else if looks_like_path(arg) {
            return Err(format!("{arg}: no such file"));
        } else {
            inputs.push(Input::Sql(arg.clone()));
        }
    }
    Ok((model, inputs))
}

/// A GGUF file (by its magic bytes), a VINDEX3 container, a Hugging Face folder or a layer
/// package folder, or a catalogue name that is not also a file here.
pub fn is_model(arg: &str) -> bool {
    let p = Path::new(arg);
    if p.is_dir() {
        return ["index.json", "config.json", "model-package.json"]
            .iter()
            .any(|f| p.join(f).is_file());
    }
    if p.is_file() {
        let mut magic = [0u8; 4];
        return std::fs::File::open(p)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok_and(|_| &magic == b"GGUF");
    }
    match lql_storage::catalogue::find(arg) {
        Ok(found) => found.is_some(),
        // A malformed user catalogue: a word that could be a model name is taken as one, so
        // that binding it reports the file's fault.
        Err(_) => !arg.is_empty() && !arg.contains(|c: char| c.is_whitespace() || c == ';'),
    }
}

/// One word naming a file (`x.lql`, `dir/x`), not statements (`STATS`, `SHOW MODELS;`).
fn looks_like_path(arg: &str) -> bool {
    if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || "';\"".contains(c)) {
        return false;
    }
    let ext = Path::new(arg)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    arg.contains('/')
        || matches!(
            ext.as_deref(),
            Some("lql" | "sql" | "txt" | "gguf" | "safetensors")
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(args: &[&str]) -> Vec<String> {
        let argv = std::iter::once("lql")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        normalize(argv)
            .into_iter()
            .skip(1)
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn sqlite_spellings_become_long_options() {
        assert_eq!(
            norm(&["-csv", "-header", "-c", "-json", "m"]),
            ["--format", "csv", "--header", "-c", "-json", "m"]
        );
        assert_eq!(norm(&["-json"]), ["--format", "array"]);
        assert_eq!(
            norm(&["-cmd", "-bail", "-noheader"]),
            ["--cmd", "-bail", "--no-header"]
        );
        assert_eq!(norm(&["--", "-csv"]), ["--", "-csv"]);
        assert_eq!(norm(&["-c", "x", "-box"]), ["-c", "x", "--format", "box"]);
        assert_eq!(norm(&["bench", "-json"]), ["bench", "-json"]);
    }

    #[test]
    fn positional_arguments_are_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.lql");
        std::fs::write(&script, "STATS;").unwrap();
        let gguf = dir.path().join("m.bin");
        std::fs::write(&gguf, b"GGUF\x03\0\0\0").unwrap();
        let folder = dir.path().join("pkg");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("model-package.json"), "{}").unwrap();

        let s = |p: &Path| p.to_str().unwrap().to_string();
        let (m, inputs) = classify(&[s(&gguf), s(&script), "STATS;".into()]).unwrap();
        assert_eq!(m, Some(s(&gguf)));
        assert_eq!(
            inputs,
            [Input::Script(script.clone()), Input::Sql("STATS;".into())]
        );
        let (m, _) = classify(&["smollm2-135m-instruct".into()]).unwrap();
        assert_eq!(m.as_deref(), Some("smollm2-135m-instruct"));
        let (m, _) = classify(&[s(&folder)]).unwrap();
        assert!(m.is_some());
        // A script first is not a model.
        let (m, inputs) = classify(&[s(&script)]).unwrap();
        assert_eq!((m, inputs.len()), (None, 1));
        // Statements, not files.
        let (m, inputs) = classify(&["TOKENIZE 'x';".into(), "STATS".into()]).unwrap();
        assert_eq!(m, None);
        assert_eq!(inputs.len(), 2);
        assert!(classify(&["/nonexistent/x.lql".into()])
            .unwrap_err()
            .contains("no such file"));
        assert!(classify(&["STATS;".into(), s(&gguf)])
            .unwrap_err()
            .contains("a model goes first"));
        assert!(classify(&[s(dir.path())])
            .unwrap_err()
            .contains("not a model"));
    }
}
