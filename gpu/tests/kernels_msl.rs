//! Every WGSL kernel validates with naga and translates to the Metal Shading Language, so a
//! shader error that only Metal would report is caught on any machine (no device needed).

use lql_gpu::shaders::{all_kernels, encodings, validate};

#[test]
fn every_kernel_validates_and_translates_to_msl() {
    let kernels = all_kernels();
    // The ops module and one matmul module per encoding.
    assert_eq!(kernels.len(), 1 + encodings().count());
    for k in &kernels {
        let (module, info) = validate(k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        for &entry in k.entry_points {
            assert!(
                module.entry_points.iter().any(|e| e.name == entry),
                "{}: no entry point {entry}",
                k.name
            );
        }
        let options = naga::back::msl::Options {
            lang_version: (2, 1),
            ..Default::default()
        };
        let (msl, _) = naga::back::msl::write_string(
            &module,
            &info,
            &options,
            &naga::back::msl::PipelineOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{}: MSL translation failed: {e}", k.name));
        for &entry in k.entry_points {
            assert!(
                msl.contains(entry),
                "{}: {entry} missing from the MSL",
                k.name
            );
        }
        assert!(msl.contains("kernel void"), "{}", k.name);
    }
}

#[test]
fn a_broken_kernel_is_reported_with_its_name() {
    let mut k = all_kernels().remove(0);
    k.source
        .push_str("\nfn broken() -> f32 { return undefined_name; }\n");
    let e = validate(&k).unwrap_err();
    assert!(e.contains("undefined_name"), "{e}");
    assert!(e.contains("ops.wgsl"), "{e}");
}
