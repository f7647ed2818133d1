//! Opening the real SmolLM2 file costs little heap: headers and tensor infos only, the
//! tokenizer arrays stay encoded in the map until first use.

mod common;

#[path = "common/heap.rs"]
mod heap;

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

#[test]
fn opening_smollm2_takes_under_5_mb_of_heap() {
    let path = common::smollm2();
    let before = heap::live();
    heap::reset_peak();
    let model = lql_storage::import::open(&path).unwrap();
    let peak = heap::peak() - before;
    let live = heap::live() - before;
    eprintln!("open: peak heap {peak} B, retained {live} B");
    assert!(peak < 5 << 20, "peak heap {peak} bytes at open");
    assert!(live < 5 << 20, "retained heap {live} bytes at open");

    // Building the tokenizer spec afterwards is where the vocabulary gets decoded.
    heap::reset_peak();
    let spec = model.tokenizer_spec().unwrap();
    eprintln!("tokenizer spec: heap +{} B", heap::live() - before - live);
    drop(spec);
}
