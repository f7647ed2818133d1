//! `lql vindex inspect|describe|representations|profiles|precision|verify PATH [--json]`:
//! the format-native reader of VINDEX3 containers (seed 002 §18.3), answering from the
//! artifact alone — `index.json`, the graph and segment headers (VERIFY also hashes the
//! payloads) — without binding a model or running LQL. `--json` prints one JSON document;
//! otherwise a table. Exit code 1 when the container is refused or VERIFY finds a fault.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use lql::{Column, Rows, Value, ValueType};
use lql_storage::format::vindex3::{self, artifact, VerifyStatus};
use serde_json::{json, Value as Json};

use crate::render::{render, OutputMode, RenderOptions};

/// What `lql vindex` answers.
#[derive(Subcommand, Debug)]
pub enum VindexCmd {
    /// The container reconstructed from itself: envelope, components, representations,
    /// profiles with derived authority, capability files
    Inspect {
        path: String,
        #[arg(long)]
        json: bool,
    },
    /// One logical object: bindings, representations, tensor tables and bound operands
    Describe {
        path: String,
        object: String,
        #[arg(long)]
        json: bool,
    },
    /// Every representation with its recorded fidelity
    Representations {
        path: String,
        #[arg(long)]
        json: bool,
    },
    /// Every profile with its selections and derived authority
    Profiles {
        path: String,
        #[arg(long)]
        json: bool,
    },
    /// Bits per weight per representation and in total, derived from the encodings
    Precision {
        path: String,
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every segment, payload, tensor, the graph and capability files
    Verify {
        path: String,
        #[arg(long)]
        json: bool,
    },
}

/// A table from a JSON array of flat objects (nested values as JSON text).
fn table(items: &[Json]) -> Rows {
    let keys: Vec<String> = items
        .first()
        .and_then(|i| i.as_object())
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let mut rows = Rows::new(
        keys.iter()
            .map(|k| Column::new(k.clone(), ValueType::Any))
            .collect(),
    );
    for i in items {
        rows.push(
            keys.iter()
                .map(|k| match &i[k] {
                    Json::Null => Value::Null,
                    Json::Bool(b) => Value::from(*b),
                    Json::Number(n) => match (n.as_i64(), n.as_f64()) {
                        (Some(v), _) => Value::from(v),
                        (None, Some(f)) => Value::from(f),
                        _ => Value::from(n.to_string()),
                    },
                    Json::String(s) => Value::from(s.as_str()),
                    other => Value::from(other.to_string()),
                })
                .collect(),
        );
    }
    rows
}

fn print_table(items: &[Json]) {
    print!(
        "{}",
        render(
            OutputMode::Table,
            "",
            &table(items),
            &RenderOptions::default()
        )
    );
}

fn to_json<T: serde::Serialize>(v: &T) -> Json {
    serde_json::to_value(v).unwrap_or(Json::Null)
}

/// Runs one `lql vindex` command.
pub fn run(cmd: &VindexCmd) -> ExitCode {
    match answer(cmd) {
        Ok(ok) => {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("lql vindex: {e}");
            ExitCode::FAILURE
        }
    }
}

fn answer(cmd: &VindexCmd) -> Result<bool, lql_storage::StorageError> {
    let out = |json: bool, doc: Json, items: &[Json]| {
        if json {
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        } else {
            print_table(items);
        }
    };
    match cmd {
        VindexCmd::Inspect { path, json } => {
            let i = artifact::inspect(Path::new(path))?;
            let doc = to_json(&i);
            if *json {
                out(true, doc, &[]);
            } else {
                let head: Vec<Json> = [
                    "path",
                    "generation",
                    "index_version",
                    "shape",
                    "graph_schema",
                    "model",
                    "family",
                    "authority",
                    "derived_from_model",
                    "num_layers",
                    "hidden_size",
                ]
                .iter()
                .map(|k| json!({"field": k, "value": doc[*k]}))
                .collect();
                print_table(&head);
                let comps: Vec<Json> = i.components.iter().map(to_json).collect();
                print_table(&comps);
                let reps: Vec<Json> = i.representations.iter().map(to_json).collect();
                print_table(&reps);
                let profs: Vec<Json> = i.profiles.iter().map(to_json).collect();
                print_table(&profs);
            }
            Ok(true)
        }
        VindexCmd::Describe { path, object, json } => {
            let d = artifact::describe_object(Path::new(path), object)?;
            let tensors: Vec<Json> = d.tensors.iter().map(to_json).collect();
            out(*json, to_json(&d), &tensors);
            Ok(true)
        }
        VindexCmd::Representations { path, json } => {
            let i = artifact::inspect(Path::new(path))?;
            let reps: Vec<Json> = i.representations.iter().map(to_json).collect();
            out(*json, Json::Array(reps.clone()), &reps);
            Ok(true)
        }
        VindexCmd::Profiles { path, json } => {
            let p: Vec<Json> = artifact::profiles(Path::new(path))?
                .iter()
                .map(to_json)
                .collect();
            out(*json, Json::Array(p.clone()), &p);
            Ok(true)
        }
        VindexCmd::Precision { path, json } => {
            let p: Vec<Json> = artifact::precision(Path::new(path))?
                .iter()
                .map(to_json)
                .collect();
            out(*json, Json::Array(p.clone()), &p);
            Ok(true)
        }
        VindexCmd::Verify { path, json } => {
            let rows = vindex3::verify(Path::new(path))?;
            let items: Vec<Json> = rows
                .iter()
                .map(|r| {
                    json!({"object": r.object, "representation": r.representation,
                           "encoding": r.encoding, "status": r.status.name(),
                           "expected": r.expected, "actual": r.actual, "detail": r.detail})
                })
                .collect();
            out(*json, Json::Array(items.clone()), &items);
            Ok(!rows.iter().any(|r| r.status == VerifyStatus::Failed))
        }
    }
}
