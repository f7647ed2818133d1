//! `DIFF "a" "b" INTO PATCH "f"` (and `DIFF CURRENT …`, `DIFF "a" CURRENT …`): the edits
//! that turn `a` into `b` (`lql_storage::overlay::derive`), written as a `.lqlpatch` stamped
//! with `a`'s identity, atomically; a change no patch can express is refused by object,
//! layer, role and reason before anything is written. One row: path, edits, added features,
//! scales, sha256, base_sha256.

use std::path::Path;
use std::sync::Arc;

use lql_storage::fsutil::hex;
use lql_storage::material::MaterialSource;
use lql_storage::overlay::derive;
use lql_storage::overlay::patch::{self as pf, PatchFile};
use lql_storage::overlay::Edit;
use lql_storage::Model;

use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// Derives and writes the patch turning `a` into `b`.
pub(crate) fn write(
    cx: &mut Cx<'_>,
    a: &dyn MaterialSource,
    b: &dyn MaterialSource,
    path: &str,
) -> Result<Rows> {
    let fa = a.overlay_form();
    if *fa.layers != a.base().overlays {
        return Err(Error::semantic(
            "DIFF … INTO PATCH: the left side is an edited state; a patch applies to a model as stored — give the model's path (DIFF \"model\" CURRENT INTO PATCH …)",
        ));
    }
    let edits = derive::derive(&fa, &b.overlay_form(), cx.cancel).map_err(|e| {
        if cx.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            Error::interrupted()
        } else {
            e.into()
        }
    })?;
    let file = PatchFile::new(identity_of(cx, a.base()), &a.base().surface, edits);
    super::protect::refuse_overwrite(
        cx,
        path,
        "DIFF … INTO PATCH",
        &[a.base().path.as_path(), b.base().path.as_path()],
    )?;
    let sha256 = pf::write(Path::new(path), &file)?;
    let added = file
        .edits
        .iter()
        .filter(|e| matches!(e, Edit::Add(_)))
        .count();
    let mut rows = Rows::new(cx.result_columns());
    rows.push(vec![
        Value::from(path),
        Value::from(super::edit::edit_count(&file.edits)),
        Value::from(added),
        Value::from(file.edits.len() - added),
        Value::from(hex(sha256)),
        Value::from(hex(file.base_sha256)),
    ]);
    Ok(rows)
}

/// The patch identity of `model`: the bound model's cached one when it is the same model
/// (the same map, or the same file), else computed (sha256 of its mapped bytes).
fn identity_of(cx: &Cx<'_>, model: &Model) -> [u8; 32] {
    if let Ok(b) = cx.bound() {
        let shared = &b.shared;
        let same_file = || match (
            std::fs::canonicalize(&shared.model.path),
            std::fs::canonicalize(&model.path),
        ) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        };
        if std::ptr::eq(Arc::as_ptr(&shared.model), model) || same_file() {
            return shared.identity();
        }
    }
    pf::model_identity(model)
}
