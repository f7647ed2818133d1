//! Artifact-only reading (seed 002 §18.12–18.20): INSPECT, DESCRIBE OBJECT, SHOW
//! REPRESENTATIONS, PRECISION and the profile listing answer from `index.json`, the graph
//! and segment headers; the module's meter proves no payload byte was read.

mod vindex3_support;

use lql_storage::format::vindex3::{
    artifact, extract, meter, show_representations, verify, ExtractEncoding,
};
use vindex3_support::{synthetic, SMALL};

#[test]
fn artifact_answers_read_no_payload_byte() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    extract(&synthetic(SMALL), &c, ExtractEncoding::Source, &mut |_| {}).unwrap();
    let (p0, h0) = (meter::payload_bytes_read(), meter::header_bytes_read());
    let i = artifact::inspect(&c).unwrap();
    assert_eq!(i.authority, "canonical");
    assert_eq!(i.graph_schema, Some(6));
    assert_eq!(i.representations.len(), 3);
    assert_eq!(i.profiles.len(), 1);
    assert_eq!(i.profiles[0].authority, "source-exact");
    let d = artifact::describe_object(&c, "text.decoder_stack").unwrap();
    assert_eq!(d.tensors.len(), 18);
    assert!(d
        .tensors
        .iter()
        .any(|t| t.operands == vec!["1.ffn_down".to_string()]));
    assert_eq!(show_representations(&c).unwrap().len(), 3);
    let p = artifact::precision(&c).unwrap();
    // Q4_1 blocks: 20 bytes per 32 weights = 5 bits per weight, derived from the encoding.
    let stack = p.iter().find(|r| r.object == "text.decoder_stack").unwrap();
    assert!(stack.encodings.contains("Q4_1"), "{}", stack.encodings);
    let total = p.last().unwrap();
    assert_eq!(total.object, "TOTAL");
    let bpw = total.bits_per_weight.unwrap();
    assert!(bpw > 5.0 && bpw < 32.0, "{bpw}");
    assert!(artifact::describe_object(&c, "text.nothing")
        .unwrap_err()
        .to_string()
        .contains("text.decoder_stack"));
    assert_eq!(
        meter::payload_bytes_read(),
        p0,
        "an artifact answer read payload"
    );
    assert!(meter::header_bytes_read() > h0, "headers were read");
    // VERIFY reads every payload byte: the meter moves.
    verify(&c).unwrap();
    assert!(meter::payload_bytes_read() > p0);
}
