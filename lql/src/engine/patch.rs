//! Patch statements: `BEGIN PATCH "f"` … `SAVE PATCH`, `APPLY PATCH "f"`, `REMOVE PATCH "f"`
//! and `SHOW PATCHES`. A patch file (storage's `overlay::patch` format) records the sha256 of
//! the model it was computed on and is refused, by name, on any other model. The session
//! patch (edits made outside BEGIN) is named `(session)`; `REMOVE PATCH "(session)"` ends it.

use std::path::Path;

use lql_storage::fsutil::hex;
use lql_storage::overlay::patch::{self as pf, PatchFile};
use lql_storage::overlay::{Edit, Patch, PatchOrigin};

use super::datum::Datum;
use super::edit::{bound_mut, edit_count, rebuild, status};
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// The session patch's name.
pub(crate) const SESSION: &str = lql_planner::SESSION_PATCH;

/// `PatchBegin path`: later edits are recorded into a patch to be saved to `path`.
pub(crate) fn begin(cx: &mut Cx<'_>, path: &str) -> Result<Datum> {
    super::protect::refuse_overwrite(cx, path, "BEGIN PATCH", &[])?;
    let e = &mut bound_mut(cx)?.edits;
    if let Some((open, _)) = &e.open {
        return Err(Error::semantic(format!(
            "patch {open:?} is being recorded: SAVE PATCH or REMOVE PATCH {open:?} first"
        )));
    }
    if e.applied.iter().any(|p| p.name() == path) {
        return Err(Error::semantic(format!(
            "patch {path:?} is applied: REMOVE PATCH {path:?} first"
        )));
    }
    e.open = Some((path.to_string(), Vec::new()));
    rebuild(cx)?;
    Ok(status("BEGIN PATCH", 0, format!("recording into {path}")))
}

/// `PatchSave`: writes the recording patch atomically; it stays applied, as a file.
pub(crate) fn save(cx: &mut Cx<'_>) -> Result<Datum> {
    let b = cx.bound()?;
    let Some((path, edits)) = b.edits.open.clone() else {
        return Err(Error::semantic(
            "no patch is being recorded: BEGIN PATCH \"file\" first",
        ));
    };
    let file = PatchFile::new(b.shared.identity(), &b.model().surface, edits.clone());
    // Checked again as it writes: the path may have become a link to a protected file.
    super::protect::refuse_overwrite(cx, &path, "SAVE PATCH", &[])?;
    let sha256 = pf::write(Path::new(&path), &file)?;
    let e = &mut bound_mut(cx)?.edits;
    e.open = None;
    e.applied.push(Patch {
        origin: PatchOrigin::File {
            path: path.clone(),
            sha256,
        },
        edits,
    });
    rebuild(cx)?;
    let n = edit_count(&file.edits);
    Ok(file_status("SAVE PATCH", &path, n, sha256))
}

/// `PatchSave path`: writes the applied patch file `path`'s version in force over that file
/// (atomically), so the state DELETE or UPDATE left it in (`edited vN`) is kept; it stays
/// applied, as the file just written. Refused when the file changed on disk since it was
/// applied (nothing is written over someone else's bytes). A patch unchanged since it was
/// read is not written again; the recording patch's name saves it as SAVE PATCH does.
pub(crate) fn save_applied(cx: &mut Cx<'_>, path: &str) -> Result<Datum> {
    let b = cx.bound()?;
    if b.edits.open.as_ref().is_some_and(|o| o.0 == path) {
        return save(cx);
    }
    if path == SESSION {
        return Err(Error::semantic("the session patch has no file to save over")
            .with_help("DIFF CURRENT INTO PATCH \"file\" keeps the whole edited state as a new file; BEGIN PATCH \"file\" records the next edits into one"));
    }
    let Some(i) = b.edits.applied.iter().position(|p| p.name() == path) else {
        return Err(Error::semantic(format!("patch {path:?} is not applied"))
            .with_help("SAVE PATCH \"file\" writes an applied patch file's edited version; SHOW PATCHES lists the patches in force"));
    };
    let patch = &b.edits.applied[i];
    let from = match &patch.origin {
        PatchOrigin::File { sha256, .. } => {
            let n = edit_count(&patch.edits);
            return Ok(status(
                "SAVE PATCH",
                n,
                format!(
                    "{path}: unchanged since it was applied (sha256 {}); nothing written",
                    hex(sha256)
                ),
            ));
        }
        PatchOrigin::Edited { from_sha256, .. } => *from_sha256,
        PatchOrigin::Session | PatchOrigin::Open(_) => {
            return Err(Error::internal(format!(
                "{path} is in the applied list without a file"
            )))
        }
    };
    let file = PatchFile::new(b.shared.identity(), &b.model().surface, patch.edits.clone());
    super::protect::refuse_overwrite_but_own(cx, path, "SAVE PATCH", path)?;
    let on_disk = {
        let (mut f, _) = lql_storage::fsutil::open_regular(Path::new(path), "patch file")?;
        lql_storage::fsutil::sha256_stream(&mut f)
            .map_err(|e| Error::io(format!("{path}: {e}")))?
            .0
    };
    if on_disk != hex(from) {
        return Err(Error::semantic(format!(
            "{path} changed on disk since it was applied (sha256 {on_disk}, applied {}); refusing to write over it",
            hex(from)
        ))
        .with_help("DIFF CURRENT INTO PATCH \"other.lqlpatch\" keeps the edited state as a new file"));
    }
    let sha256 = pf::write(Path::new(path), &file)?;
    bound_mut(cx)?.edits.applied[i].origin = PatchOrigin::File {
        path: path.to_string(),
        sha256,
    };
    let n = edit_count(&file.edits);
    Ok(file_status("SAVE PATCH", path, n, sha256))
}

/// The status of a statement that wrote or read the patch file `path` of `n` edits.
fn file_status(statement: &str, path: &str, n: usize, sha256: [u8; 32]) -> Datum {
    status(
        statement,
        n,
        format!("{path}: {n} edits, sha256 {}", hex(sha256)),
    )
}

/// `PatchApply path`: reads, checks and applies a patch file.
pub(crate) fn apply(cx: &mut Cx<'_>, path: &str) -> Result<Datum> {
    let b = cx.bound()?;
    if b.edits.applied.iter().any(|p| p.name() == path)
        || b.edits.open.as_ref().is_some_and(|o| o.0 == path)
    {
        return Err(Error::semantic(format!(
            "patch {path:?} is already applied"
        )));
    }
    let (file, sha256) = pf::read(Path::new(path))?;
    let identity = b.shared.identity();
    if file.base_sha256 != identity {
        return Err(Error::semantic(format!(
            "{path}: the patch was computed on the model with sha256 {}; the bound model {} has sha256 {}",
            hex(file.base_sha256),
            b.name,
            hex(identity)
        ))
        .with_help("apply it to the model it was made on"));
    }
    let s = &b.model().surface;
    if file.hidden != s.hidden || file.n_layers != s.n_layers {
        return Err(Error::semantic(format!(
            "{path}: the patch is for hidden size {} and {} layers; {} has {} and {}",
            file.hidden, file.n_layers, b.name, s.hidden, s.n_layers
        )));
    }
    if let Some(dup) = b
        .edits
        .applied
        .iter()
        .find(|p| matches!(&p.origin, PatchOrigin::File { sha256: h, .. } if *h == sha256))
    {
        return Err(Error::semantic(format!(
            "{path} has the same contents as the applied patch {}",
            dup.name()
        )));
    }
    let n = edit_count(&file.edits);
    let e = &mut bound_mut(cx)?.edits;
    e.applied.push(Patch {
        origin: PatchOrigin::File {
            path: path.to_string(),
            sha256,
        },
        edits: file.edits,
    });
    if let Err(err) = rebuild(cx) {
        bound_mut(cx)?.edits.applied.pop();
        rebuild(cx)?;
        return Err(err.with_help(format!("{path} was not applied")));
    }
    Ok(file_status("APPLY PATCH", path, n, sha256))
}

/// `PatchRemove path`: takes a patch (a file, the recording one, or `(session)`) out of the
/// stack; the files on disk are left alone.
pub(crate) fn remove(cx: &mut Cx<'_>, path: &str) -> Result<Datum> {
    let e = &mut bound_mut(cx)?.edits;
    let n = if path == SESSION {
        edit_count(&std::mem::take(&mut e.session))
    } else if e.open.as_ref().is_some_and(|o| o.0 == path) {
        e.open.take().map_or(0, |o| edit_count(&o.1))
    } else if let Some(i) = e.applied.iter().position(|p| p.name() == path) {
        edit_count(&e.applied.remove(i).edits)
    } else {
        return Err(Error::semantic(format!("patch {path:?} is not applied"))
            .with_help("SHOW PATCHES lists the patches in force"));
    };
    rebuild(cx)?;
    Ok(status(
        "REMOVE PATCH",
        n,
        format!("{path}: {n} edits removed"),
    ))
}

fn layers_of(edits: &[Edit]) -> String {
    let mut l: Vec<usize> = edits.iter().map(|e| e.layer()).collect();
    l.sort_unstable();
    l.dedup();
    if l.is_empty() {
        String::new()
    } else {
        lql_storage::model::layer_list(&l)
    }
}

/// `SHOW PATCHES`: the patch stack, oldest first.
pub(crate) fn show(cx: &mut Cx<'_>) -> Result<Rows> {
    let b = cx.bound()?;
    let base = hex(b.shared.identity());
    let mut rows = Rows::new(super::columns_of(&lql_planner::show_columns(
        lql_planner::ShowWhat::Patches,
    )));
    for p in b.edits.patches() {
        let (state, sha) = match &p.origin {
            PatchOrigin::File { sha256, .. } => ("applied".to_string(), hex(sha256)),
            // No file holds this state: no sha256, as for the session's.
            PatchOrigin::Edited { version, .. } => (format!("edited v{version}"), String::new()),
            PatchOrigin::Session => ("session".to_string(), String::new()),
            PatchOrigin::Open(_) => ("recording".to_string(), String::new()),
        };
        rows.push(vec![
            Value::from(p.name()),
            Value::from(state),
            Value::from(edit_count(&p.edits)),
            Value::from(layers_of(&p.edits)),
            Value::from(sha),
            Value::from(base.as_str()),
        ]);
    }
    Ok(rows)
}
