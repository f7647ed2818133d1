//! DELETE and UPDATE FROM edges on an applied patch file (SmolLM2): the edge leaves the
//! patch in force, which becomes the file's next in-memory version (SHOW PATCHES: `edited
//! v2`), while the file on disk is untouched; UPDATE's rewritten edge goes to the session
//! patch; REMOVE PATCH still restores the base logits bit for bit.

use lql::{Connection, Rows, Value};
use sha2::{Digest, Sha256};

const TOWER: &str = "The Eiffel Tower is located in the city of";
const COLOSSEUM: &str = "The Colosseum is located in the city of";

fn top(c: &Connection, prompt: &str) -> String {
    c.execute(&format!("INFER {prompt:?} TOP 1")).unwrap().rows[0][1]
        .to_string()
        .trim()
        .to_string()
}

fn logits(c: &Connection, prompt: &str) -> Rows {
    c.execute(&format!("INFER {prompt:?} TOP 50")).unwrap()
}

fn patches(c: &Connection) -> Vec<(String, String, i64)> {
    c.execute("SHOW PATCHES")
        .unwrap()
        .rows
        .iter()
        .map(|r| {
            let Value::Int(n) = r[2] else { panic!("{r:?}") };
            (r[0].to_string(), r[1].to_string(), n)
        })
        .collect()
}

#[test]
fn delete_and_update_reach_the_edges_of_an_applied_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.lqlpatch");
    let name = file.display().to_string();
    let c = lql_tests::connect_default();
    let base_tower = logits(&c, TOWER);
    let base_colosseum = logits(&c, COLOSSEUM);
    c.execute(&format!("BEGIN PATCH {name:?}")).unwrap();
    c.execute(&format!(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES \
         ('Eiffel Tower', 'location', 'Rome', '{TOWER}')"
    ))
    .unwrap();
    c.execute(&format!(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES \
         ('Colosseum', 'location', 'London', '{COLOSSEUM}')"
    ))
    .unwrap();
    c.execute("SAVE PATCH").unwrap();
    let on_disk = Sha256::digest(std::fs::read(&file).unwrap()).to_vec();
    assert_eq!(patches(&c), vec![(name.clone(), "applied".into(), 2)]);
    assert_eq!(top(&c, TOWER), "Rome");
    assert_eq!(top(&c, COLOSSEUM), "London");

    // DELETE: the tower's edge leaves the file's version in force.
    let r = c
        .execute("DELETE FROM edges WHERE entity = 'Eiffel Tower'")
        .unwrap();
    assert_eq!(r.rows[0][1], Value::Int(1), "{r:?}");
    assert_eq!(patches(&c), vec![(name.clone(), "edited v2".into(), 1)]);
    // No file holds the edited state: SHOW PATCHES gives it no sha256.
    let shown = c.execute("SHOW PATCHES").unwrap();
    assert_eq!(shown.rows[0][4], Value::from(""), "{shown:?}");
    assert_eq!(top(&c, TOWER), "Paris");
    assert_eq!(top(&c, COLOSSEUM), "London");

    // UPDATE: the Colosseum's edge is rewritten into the session patch.
    let r = c
        .execute("UPDATE edges SET target = 'Berlin' WHERE entity = 'Colosseum'")
        .unwrap();
    assert_eq!(r.rows[0][1], Value::Int(1), "{r:?}");
    assert_eq!(
        patches(&c),
        vec![
            (name.clone(), "edited v3".into(), 0),
            ("(session)".into(), "session".into(), 1)
        ]
    );
    assert_eq!(top(&c, COLOSSEUM), "Berlin");
    let edges = c
        .execute("SELECT entity, target, patch FROM edges")
        .unwrap();
    assert_eq!(
        edges.rows,
        vec![vec![
            Value::from("Colosseum"),
            Value::from("Berlin"),
            Value::from("(session)")
        ]]
    );

    // The file is as it was saved; removing everything restores the base bit for bit.
    assert_eq!(
        Sha256::digest(std::fs::read(&file).unwrap()).to_vec(),
        on_disk
    );
    c.execute(&format!("REMOVE PATCH {name:?}")).unwrap();
    c.execute("REMOVE PATCH \"(session)\"").unwrap();
    assert!(patches(&c).is_empty());
    assert_eq!(logits(&c, TOWER).rows, base_tower.rows);
    assert_eq!(logits(&c, COLOSSEUM).rows, base_colosseum.rows);

    // Applied again, the file holds both edges as saved.
    c.execute(&format!("APPLY PATCH {name:?}")).unwrap();
    assert_eq!(patches(&c), vec![(name, "applied".into(), 2)]);
    assert_eq!(top(&c, TOWER), "Rome");
}

/// `SAVE PATCH "file"` writes an applied file's edited version over that file (atomically),
/// after checking that the file still holds the bytes it was applied from; applied again,
/// the file gives that state. An unchanged patch is not written again; the session patch
/// and a patch that is not applied are refused by name.
#[test]
fn an_edited_applied_file_is_saved_over_itself() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.lqlpatch");
    let name = file.display().to_string();
    let c = lql_tests::connect_default();
    c.execute(&format!("BEGIN PATCH {name:?}")).unwrap();
    c.execute(&format!(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES \
         ('Eiffel Tower', 'location', 'Rome', '{TOWER}'), \
         ('Colosseum', 'location', 'London', '{COLOSSEUM}')"
    ))
    .unwrap();
    c.execute("SAVE PATCH").unwrap();
    let r = c.execute(&format!("SAVE PATCH {name:?}")).unwrap();
    assert!(
        r.rows[0][2].to_string().contains("nothing written"),
        "{r:?}"
    );

    c.execute("DELETE FROM edges WHERE entity = 'Eiffel Tower'")
        .unwrap();
    assert_eq!(patches(&c), vec![(name.clone(), "edited v2".into(), 1)]);
    let r = c.execute(&format!("SAVE PATCH {name:?}")).unwrap();
    assert_eq!(r.rows[0][1], Value::Int(1), "{r:?}");
    assert_eq!(patches(&c), vec![(name.clone(), "applied".into(), 1)]);
    let on_disk = Sha256::digest(std::fs::read(&file).unwrap());
    let shown = c.execute("SHOW PATCHES").unwrap();
    assert_eq!(shown.rows[0][4], Value::from(hex(&on_disk)), "{shown:?}");

    // Applied again, the file holds the edited state.
    c.execute(&format!("REMOVE PATCH {name:?}")).unwrap();
    c.execute(&format!("APPLY PATCH {name:?}")).unwrap();
    assert_eq!(patches(&c), vec![(name.clone(), "applied".into(), 1)]);
    assert_eq!(top(&c, TOWER), "Paris");
    assert_eq!(top(&c, COLOSSEUM), "London");

    // A file that changed on disk since it was applied is not written over.
    c.execute("DELETE FROM edges WHERE entity = 'Colosseum'")
        .unwrap();
    std::fs::write(&file, b"someone else's bytes").unwrap();
    let e = c.execute(&format!("SAVE PATCH {name:?}")).unwrap_err();
    assert!(e.message.contains("changed on disk"), "{}", e.message);
    assert_eq!(std::fs::read(&file).unwrap(), b"someone else's bytes");

    for (q, says) in [
        ("SAVE PATCH \"(session)\"", "the session patch has no file"),
        ("SAVE PATCH \"nope.lqlpatch\"", "is not applied"),
    ] {
        let e = c.execute(q).unwrap_err();
        assert!(e.message.contains(says), "{q}: {}", e.message);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
