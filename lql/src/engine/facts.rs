//! Fact files for `INSERT INTO edges FROM` and `EVALUATE EDITS`: CounterFact records (ROME's dataset: `requested_rewrite`
//! with `prompt`, `subject`, `target_new`, `target_true`, plus `paraphrase_prompts` and
//! `neighborhood_prompts`) and LQL's own fact files (`{"version": 1, "facts": [{"entity",
//! "relation", "new", "true", "prompt", "paraphrases", "neighbourhood"}]}`, the shape of
//! `tests/fixtures/edit/facts.json`; `target` may stand for `new`, and `true` is needed by
//! EVALUATE EDITS only). A top-level array of either kind is read too.
//!
//! A `.csv` file holds LQL's facts one per row under a header naming the fields (`entity`,
//! `relation`, `new` or `target`, `true`, `prompt`, `paraphrases`, `neighbourhood`, in any
//! order; other columns are refused); the list fields hold their prompts separated by `|`,
//! and an empty cell is a missing field. Each row is read as the JSON record it stands for,
//! so both shapes are checked by one definition.
//!
//! Every malformed record is refused naming the file, the record and the field; nothing is
//! sized by a number the file states.

use std::path::Path;

use lql_planner::EdgeRow;
use serde_json::Value as Json;

use crate::error::{Error, ErrorKind, Result};

/// The largest fact file read (CounterFact's 21,919 records are about 40 MB).
const MAX_FILE_BYTES: u64 = 1 << 30;

/// One fact to insert and score.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fact {
    pub subject: String,
    pub relation: String,
    /// The edit prompt, the subject in it.
    pub prompt: String,
    /// The target the edit writes.
    pub target_new: String,
    /// What the model is taken to say before the edit (EVALUATE EDITS needs it).
    pub target_true: Option<String>,
    /// Rephrasings of the edit prompt (the edit should reach them).
    pub paraphrases: Vec<String>,
    /// Prompts about other subjects whose answer is `target_true` (the edit should not
    /// reach them).
    pub neighbours: Vec<String>,
}

impl Fact {
    /// The edge an INSERT writes for this fact.
    pub fn edge_row(&self) -> EdgeRow {
        EdgeRow {
            entity: self.subject.clone(),
            relation: self.relation.clone(),
            target: self.target_new.clone(),
            prompt: Some(self.prompt.clone()),
        }
    }
}

/// Reads the facts of `path`, the first `limit` of them when given.
pub(crate) fn read(path: &str, limit: Option<usize>) -> Result<Vec<Fact>> {
    let text = lql_storage::fsutil::read_capped_text(Path::new(path), "fact file", MAX_FILE_BYTES)?;
    if is_csv(path) {
        return parse(path, &csv_records(path, &text)?, limit);
    }
    let doc: Json = serde_json::from_str(&text).map_err(|e| {
        format_error(
            path,
            format!(
                "is not JSON: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    parse(path, &doc, limit)
}

/// Whether `path` names a CSV fact file (by its extension).
fn is_csv(path: &str) -> bool {
    Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// The columns a CSV fact file may have; the list fields split on `|`.
const CSV_FIELDS: [&str; 6] = ["entity", "relation", "new", "target", "true", "prompt"];
const CSV_LISTS: [&str; 2] = ["paraphrases", "neighbourhood"];

/// A CSV fact file's rows as LQL fact records (a JSON array).
fn csv_records(path: &str, text: &str) -> Result<Json> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format_error(path, format!("has no CSV header: {e}")))?
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    for (k, h) in header.iter().enumerate() {
        if !CSV_FIELDS.contains(&h.as_str()) && !CSV_LISTS.contains(&h.as_str()) {
            return Err(format_error(
                path,
                format!(
                    "has a column {h:?} (column {}); a CSV fact file's columns are entity, relation, new (or target), true, prompt, paraphrases, neighbourhood",
                    k + 1
                ),
            ));
        }
        if header[..k].contains(h) {
            return Err(format_error(path, format!("names the column {h:?} twice")));
        }
    }
    let mut records = Vec::new();
    for (n, row) in reader.records().enumerate() {
        let row = row.map_err(|e| {
            format_error(
                path,
                match e.position() {
                    Some(p) => format!("record {n} (line {}): {e}", p.line()),
                    None => format!("record {n}: {e}"),
                },
            )
        })?;
        let mut obj = serde_json::Map::new();
        for (h, cell) in header.iter().zip(row.iter()) {
            if cell.is_empty() {
                continue;
            }
            let v = if CSV_LISTS.contains(&h.as_str()) {
                Json::Array(
                    cell.split('|')
                        .map(|p| Json::String(p.trim().to_string()))
                        .collect(),
                )
            } else {
                Json::String(cell.to_string())
            };
            obj.insert(h.clone(), v);
        }
        records.push(Json::Object(obj));
    }
    Ok(Json::Array(records))
}

fn format_error(path: &str, what: String) -> Error {
    Error::new(ErrorKind::Format, format!("fact file {path:?} {what}"))
}

/// The facts of a parsed document.
pub(crate) fn parse(path: &str, doc: &Json, limit: Option<usize>) -> Result<Vec<Fact>> {
    let records = match doc {
        Json::Array(a) => a,
        Json::Object(o) => match o.get("facts") {
            Some(Json::Array(a)) => {
                if let Some(v) = o.get("version") {
                    if v.as_u64() != Some(1) {
                        return Err(format_error(
                            path,
                            format!("has version {v}; this build reads version 1"),
                        ));
                    }
                }
                a
            }
            _ => {
                return Err(format_error(
                    path,
                    "is an object without a \"facts\" array; expected CounterFact records (an array) or {\"version\": 1, \"facts\": […]}".into(),
                ))
            }
        },
        _ => {
            return Err(format_error(
                path,
                "holds neither an array of records nor {\"version\": 1, \"facts\": […]}".into(),
            ))
        }
    };
    if records.is_empty() {
        return Err(format_error(path, "holds no facts".into()));
    }
    let n = limit.map_or(records.len(), |l| l.min(records.len()));
    records[..n]
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let at = Record { path, index: i };
            if r.get("requested_rewrite").is_some() {
                at.counterfact(r)
            } else {
                at.lql(r)
            }
        })
        .collect()
}

/// Where a record stands, for its errors.
struct Record<'a> {
    path: &'a str,
    index: usize,
}

impl Record<'_> {
    fn error(&self, field: &str, what: &str) -> Error {
        format_error(self.path, format!("record {}: {field} {what}", self.index))
    }

    /// A non-empty string at `field` of `obj` (`name` is how errors call it).
    fn text(&self, obj: &Json, field: &str, name: &str) -> Result<String> {
        match obj.get(field) {
            Some(Json::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(Json::String(_)) => Err(self.error(name, "is empty")),
            Some(_) => Err(self.error(name, "is not a string")),
            None => Err(self.error(name, "is missing")),
        }
    }

    /// A list of non-empty strings at `field` (missing: none).
    fn texts(&self, obj: &Json, field: &str) -> Result<Vec<String>> {
        match obj.get(field) {
            None | Some(Json::Null) => Ok(Vec::new()),
            Some(Json::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(k, v)| match v {
                    Json::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                    _ => Err(self.error(&format!("{field}[{k}]"), "is not a non-empty string")),
                })
                .collect(),
            Some(_) => Err(self.error(field, "is not a list of strings")),
        }
    }

    /// A CounterFact target: `{"str": …}` (or a plain string).
    fn target(&self, rw: &Json, field: &str) -> Result<String> {
        let name = format!("requested_rewrite.{field}");
        match rw.get(field) {
            Some(Json::String(_)) => self.text(rw, field, &name),
            Some(t @ Json::Object(_)) => self.text(t, "str", &format!("{name}.str")),
            Some(_) => Err(self.error(&name, "is neither {\"str\": …} nor a string")),
            None => Err(self.error(&name, "is missing")),
        }
    }

    fn counterfact(&self, r: &Json) -> Result<Fact> {
        let rw = r
            .get("requested_rewrite")
            .filter(|v| v.is_object())
            .ok_or_else(|| self.error("requested_rewrite", "is not an object"))?;
        let subject = self.text(rw, "subject", "requested_rewrite.subject")?;
        let template = self.text(rw, "prompt", "requested_rewrite.prompt")?;
        if template.matches("{}").count() != 1 {
            return Err(self.error(
                "requested_rewrite.prompt",
                "must hold `{}` (where the subject goes) exactly once",
            ));
        }
        let relation = match rw.get("relation_id") {
            Some(Json::String(s)) if !s.is_empty() => s.clone(),
            _ => "relation".to_string(),
        };
        Ok(Fact {
            prompt: template.replace("{}", &subject),
            subject,
            relation,
            target_new: self.target(rw, "target_new")?,
            target_true: match rw.get("target_true") {
                None => None,
                Some(_) => Some(self.target(rw, "target_true")?),
            },
            paraphrases: self.texts(r, "paraphrase_prompts")?,
            neighbours: self.texts(r, "neighborhood_prompts")?,
        })
    }

    fn lql(&self, r: &Json) -> Result<Fact> {
        if !r.is_object() {
            return Err(format_error(
                self.path,
                format!("record {}: is not an object", self.index),
            ));
        }
        let subject = self.text(r, "entity", "entity")?;
        let relation = self.text(r, "relation", "relation")?;
        let prompt = match r.get("prompt") {
            None => format!("The {relation} of {subject} is"),
            Some(_) => self.text(r, "prompt", "prompt")?,
        };
        Ok(Fact {
            subject,
            relation,
            prompt,
            target_new: match (r.get("new"), r.get("target")) {
                (None, Some(_)) => self.text(r, "target", "target")?,
                _ => self.text(r, "new", "new")?,
            },
            target_true: match r.get("true") {
                None => None,
                Some(_) => Some(self.text(r, "true", "true")?),
            },
            paraphrases: self.texts(r, "paraphrases")?,
            neighbours: self.texts(r, "neighbourhood")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(doc: &str) -> Result<Vec<Fact>> {
        parse("f.json", &serde_json::from_str(doc).unwrap(), None)
    }

    fn csv_facts(text: &str) -> Result<Vec<Fact>> {
        parse("f.csv", &csv_records("f.csv", text)?, None)
    }

    #[test]
    fn csv_rows_read_as_the_records_they_stand_for() {
        let f = csv_facts(
            "entity,relation,target,true,prompt,paraphrases,neighbourhood\n\
             Atlantis,capital,Paris,Poseidonia,\"The capital of Atlantis, the lost city, is\",\
             Atlantis's capital is | Atlantis has its capital in,The capital of Greece is\n\
             Lemuria, language ,Tamil,,,,\n",
        )
        .unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].prompt, "The capital of Atlantis, the lost city, is");
        assert_eq!(f[0].target_true.as_deref(), Some("Poseidonia"));
        assert_eq!(
            f[0].paraphrases,
            ["Atlantis's capital is", "Atlantis has its capital in"]
        );
        assert_eq!(f[0].neighbours, ["The capital of Greece is"]);
        // Empty cells are missing fields: the default prompt, no true target, no lists.
        assert_eq!(f[1].relation, "language");
        assert_eq!(f[1].prompt, "The language of Lemuria is");
        assert_eq!(f[1].target_true, None);
        assert!(f[1].paraphrases.is_empty() && f[1].neighbours.is_empty());
    }

    #[test]
    fn bad_csv_fact_files_are_refused_by_name() {
        let e = csv_facts("entity,relation,answer\nA,b,c\n").unwrap_err();
        assert!(
            e.to_string().contains("column \"answer\" (column 3)"),
            "{e}"
        );
        let e = csv_facts("entity,relation,target,entity\nA,b,c,d\n").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        let e = csv_facts("entity,relation,target\nA,b\n").unwrap_err();
        assert!(e.to_string().contains("record 0"), "{e}");
        let e = csv_facts("entity,relation,target\nA,,c\n").unwrap_err();
        assert!(
            e.to_string().contains("record 0: relation is missing"),
            "{e}"
        );
        let e = csv_facts("entity,relation,target\n").unwrap_err();
        assert!(e.to_string().contains("holds no facts"), "{e}");
    }

    #[test]
    fn counterfact_records_read_with_the_subject_in_the_prompt() {
        let f = facts(
            r#"[{"case_id": 0, "requested_rewrite": {"prompt": "{} is located in",
                "relation_id": "P17", "subject": "Eiffel Tower",
                "target_new": {"str": "Rome", "id": "Q220"},
                "target_true": {"str": "Paris", "id": "Q90"}},
                "paraphrase_prompts": ["Where is the Eiffel Tower? It is in"],
                "neighborhood_prompts": ["The Louvre is located in"],
                "attribute_prompts": [], "generation_prompts": []}]"#,
        )
        .unwrap();
        assert_eq!(f[0].prompt, "Eiffel Tower is located in");
        assert_eq!(f[0].target_new, "Rome");
        assert_eq!(f[0].target_true.as_deref(), Some("Paris"));
        assert_eq!(f[0].relation, "P17");
        assert_eq!(f[0].paraphrases.len(), 1);
        assert_eq!(
            f[0].neighbours,
            vec!["The Louvre is located in".to_string()]
        );
    }

    #[test]
    fn lql_fact_files_read() {
        let f = facts(
            r#"{"version": 1, "facts": [{"entity": "Paris", "relation": "city_country",
                "true": "France", "new": "Germany",
                "prompt": "Paris is a city in the country of",
                "paraphrases": ["The city of Paris is located in"],
                "neighbourhood": ["Lille is a city in the country of"]}]}"#,
        )
        .unwrap();
        assert_eq!(f[0].subject, "Paris");
        assert_eq!(f[0].target_new, "Germany");
    }

    #[test]
    fn malformed_records_are_refused_by_record_and_field() {
        let cases = [
            (
                r#"[{"requested_rewrite": {"prompt": "{} is in", "subject": "A", "target_new": {"str": ""}, "target_true": {"str": "B"}}}]"#,
                "record 0: requested_rewrite.target_new.str is empty",
            ),
            (
                r#"[{"requested_rewrite": {"prompt": "is in", "subject": "A", "target_new": "C", "target_true": "B"}}]"#,
                "record 0: requested_rewrite.prompt must hold `{}`",
            ),
            (
                r#"{"version": 1, "facts": [{"entity": "A", "relation": "r", "true": "C"}]}"#,
                "record 0: new is missing",
            ),
            (
                r#"{"version": 1, "facts": [{"entity": "A", "relation": "r", "new": "C", "true": 4}]}"#,
                "record 0: true is not a string",
            ),
            (r#"{"version": 2, "facts": []}"#, "has version 2"),
            (r#"{"version": 1, "facts": []}"#, "holds no facts"),
            (
                r#"{"facts": [{"entity": "A", "relation": "r", "new": "C", "true": "B", "paraphrases": [3]}]}"#,
                "record 0: paraphrases[0] is not a non-empty string",
            ),
            (r#""text""#, "holds neither an array"),
        ];
        for (doc, want) in cases {
            let e = facts(doc).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Format, "{doc}");
            assert!(e.message.contains(want), "{doc}: {}", e.message);
        }
    }

    #[test]
    fn target_stands_for_new_and_true_is_optional() {
        let f = facts(r#"[{"entity": "A", "relation": "r", "target": "C"}]"#).unwrap();
        assert_eq!(f[0].target_new, "C");
        assert_eq!(f[0].target_true, None);
    }

    #[test]
    fn limit_takes_the_first_facts() {
        let doc = serde_json::json!({"facts": [
            {"entity": "A", "relation": "r", "new": "C", "true": "B"},
            {"entity": "D", "relation": "r", "new": "C", "true": "B"},
        ]});
        let f = parse("f.json", &doc, Some(1)).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].prompt, "The r of A is");
    }
}
