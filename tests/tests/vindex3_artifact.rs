//! The artifact-only statements (seed 002 §18.12–18.20): `INSPECT "c"`, `DESCRIBE OBJECT "c"
//! "obj"`, `SHOW REPRESENTATIONS "c"` and `PRECISION "c"` answer from index.json, the graph
//! and segment headers, with no model bound, and read 0 payload bytes (the VINDEX3 meter).

use std::path::Path;

use lql::Connection;
use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::vindex3::meter;

fn q(p: &Path) -> String {
    p.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

#[test]
fn artifact_statements_read_no_payload_byte() {
    let t = tempfile::tempdir().unwrap();
    let gguf = t.path().join("tiny.gguf");
    TinyModel::llama().write(&gguf).unwrap();
    let out = t.path().join("tiny.vindex");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!(
        "EXTRACT MODEL \"{}\" INTO \"{}\" ENCODING Q8_0",
        q(&gguf),
        q(&out)
    ))
    .unwrap();

    // A fresh connection with nothing bound.
    let fresh = Connection::open_in_memory().unwrap();
    let (h0, p0) = (meter::header_bytes_read(), meter::payload_bytes_read());
    let inspect = fresh.execute(&format!("INSPECT \"{}\"", q(&out))).unwrap();
    assert_eq!(inspect.column_names(), ["field", "value"]);
    let field = |name: &str| {
        inspect
            .rows
            .iter()
            .find(|r| r[0].to_string() == name)
            .map(|r| r[1].to_string())
            .unwrap_or_else(|| panic!("no {name} row"))
    };
    assert_eq!(field("generation"), "VINDEX3");
    assert_eq!(field("shape"), "graph");

    let describe = fresh
        .execute(&format!(
            "DESCRIBE OBJECT \"{}\" \"text.decoder_stack\"",
            q(&out)
        ))
        .unwrap();
    assert_eq!(
        describe.column_names(),
        [
            "representation",
            "name",
            "dtype",
            "shape",
            "bytes",
            "operands"
        ]
    );
    assert!(describe.rows.iter().any(|r| r[2].to_string() == "Q8_0"));

    let reps = fresh
        .execute(&format!("SHOW REPRESENTATIONS \"{}\"", q(&out)))
        .unwrap();
    assert_eq!(reps.rows.len(), 3, "embedding, decoder stack, final norm");
    let precision = fresh
        .execute(&format!("PRECISION \"{}\"", q(&out)))
        .unwrap();
    let total = precision
        .rows
        .iter()
        .find(|r| r[0].to_string() == "TOTAL")
        .expect("a TOTAL row");
    assert!(total[5].to_string().parse::<f64>().unwrap() > 8.0);

    assert!(meter::header_bytes_read() > h0, "segment headers were read");
    assert_eq!(meter::payload_bytes_read(), p0, "no payload byte was read");

    // SHOW … "c" where the target takes no container is refused by name.
    let e = fresh
        .execute(&format!("SHOW TENSORS \"{}\"", q(&out)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("takes no container"), "{e}");
}
