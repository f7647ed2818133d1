//! `Database`: what every connection shares, read-only — mapped model files, tokenizer
//! snapshots and feature-label caches — as DuckDB's `Database` and SQLite's shared cache
//! do. Any number of [`Connection`]s on one database run statements concurrently on
//! different threads, each with its own session (bound model, executor, settings).
//!
//! A model opened twice (by two connections, or by USE in one) is mapped once: the
//! registry keys models by their canonical path and hands out the same
//! [`SharedModel`] while anyone holds it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use lql_exec::browse::LabelCache;
use lql_exec::tokenizer::Tokenizer;
use lql_storage::Model;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::flags::OpenFlags;

/// A model opened once and shared by every connection of a database.
pub(crate) struct SharedModel {
    pub model: Arc<Model>,
    /// Built on first use; an error is kept and returned to every later caller.
    tokenizer: OnceLock<std::result::Result<Arc<Tokenizer>, Error>>,
    /// Feature labels computed so far (browse statements fill it lazily).
    pub labels: Arc<LabelCache>,
    /// sha256 of the mapped bytes (patch files record it), hashed on first use.
    identity: OnceLock<[u8; 32]>,
    /// The container's stored labels, read into `labels` on first use: the segment they
    /// came from (`None`: nothing stored that applies to this binding).
    stored_labels: OnceLock<std::result::Result<Option<String>, Error>>,
    /// The f32 layers INSERT's value optimisation runs through (`DenseTail`, hundreds of
    /// MB): one per model, shared by every connection, since it holds only base operands
    /// (each connection's overlay is read per call). Built under the lock, so connections
    /// that INSERT at once wait for one build instead of each making its own.
    dense_tail: Mutex<Option<Arc<lql_exec::grad::DenseTail>>>,
}

impl SharedModel {
    pub(crate) fn new(model: Model) -> SharedModel {
        SharedModel {
            model: Arc::new(model),
            tokenizer: OnceLock::new(),
            labels: Arc::new(LabelCache::new()),
            identity: OnceLock::new(),
            stored_labels: OnceLock::new(),
            dense_tail: Mutex::new(None),
        }
    }

    /// Bytes of the shared f32 tail (0 before any INSERT).
    pub fn dense_tail_bytes(&self) -> usize {
        let slot = self.dense_tail.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().map_or(0, |t| t.bytes())
    }

    /// The shared f32 tail from layer `first` on: the one kept when it starts there, else
    /// `build`'s (which replaces it: one tail per model at a time).
    pub fn dense_tail(
        &self,
        first: usize,
        build: impl FnOnce() -> Result<lql_exec::grad::DenseTail>,
    ) -> Result<Arc<lql_exec::grad::DenseTail>> {
        let mut slot = self.dense_tail.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = slot.as_ref().filter(|t| t.first() == first) {
            return Ok(t.clone());
        }
        // The old tail goes before the new one is built: never two at once.
        *slot = None;
        let t = Arc::new(build()?);
        *slot = Some(t.clone());
        Ok(t)
    }

    /// The label cache, seeded once from the container's stored labels segment when it
    /// applies to this binding (computed from the representations it maps). A stored
    /// segment that fails its checks is an error naming it, never a silent fallback.
    pub fn labels(&self) -> Result<Arc<LabelCache>> {
        self.stored_labels
            .get_or_init(|| self.seed_stored_labels())
            .clone()?;
        Ok(self.labels.clone())
    }

    fn seed_stored_labels(&self) -> std::result::Result<Option<String>, Error> {
        use lql_storage::format::vindex3::labels;
        let m = &self.model;
        if m.kind != lql_storage::model::SourceKind::Vindex3 || m.surface.moe.is_some() {
            return Ok(None);
        }
        let Ok(Some(entry)) = labels::applicable(m)? else {
            return Ok(None);
        };
        let s = &m.surface;
        let table = labels::read(&m.path, &entry, s.n_layers, s.ffn, s.vocab)?;
        self.labels.seed_stored(
            entry.segment.clone(),
            table.features,
            table.top_k,
            &table.top,
        );
        Ok(Some(entry.segment))
    }

    /// Seeds the cache from labels just stored for this binding (REPRESENT LABELS).
    pub fn seed_labels(
        &self,
        segment: String,
        table: &lql_storage::format::vindex3::labels::LabelTable,
    ) {
        self.labels.clear();
        self.labels
            .seed_stored(segment, table.features, table.top_k, &table.top);
    }

    /// The model's identity for patch files: the sha256 of its mapped bytes (computed once).
    pub fn identity(&self) -> [u8; 32] {
        *self
            .identity
            .get_or_init(|| lql_storage::overlay::patch::model_identity(&self.model))
    }

    /// The model's tokenizer, built once.
    pub fn tokenizer(&self) -> Result<Arc<Tokenizer>> {
        self.tokenizer
            .get_or_init(|| {
                let spec = self.model.tokenizer_spec()?;
                Ok(Arc::new(Tokenizer::from_spec_with_special(
                    &spec,
                    &self.model.surface.special,
                )?))
            })
            .clone()
    }
}

struct Inner {
    /// Open models by canonical path (weak: a model lives while a binding holds it).
    models: Mutex<Vec<(PathBuf, Weak<SharedModel>)>>,
    /// The model `Database::open` bound, handed to each new connection.
    default: Option<(String, Arc<SharedModel>)>,
    /// How the database may be used (offline, read-only), for every connection.
    flags: OpenFlags,
}

/// Shared, read-only state of any number of connections. Cheap to clone.
#[derive(Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("default", &self.inner.default.as_ref().map(|d| &d.0))
            .finish_non_exhaustive()
    }
}

impl Default for Database {
    fn default() -> Self {
        Database::new()
    }
}

impl Database {
    /// A database with no model; connections bind one with `USE`.
    pub fn new() -> Database {
        Database::new_with_flags(OpenFlags::NONE)
    }

    /// [`Database::new`] with options ([`OpenFlags`]: offline, read-only).
    pub fn new_with_flags(flags: OpenFlags) -> Database {
        Database {
            inner: Arc::new(Inner {
                models: Mutex::new(Vec::new()),
                default: None,
                flags,
            }),
        }
    }

    /// Opens a model (a path, or a catalogue name fetched into the local cache if needed)
    /// that every connection of this database starts bound to.
    pub fn open(path_or_name: impl AsRef<str>) -> Result<Database> {
        Database::open_with_flags(path_or_name, OpenFlags::NONE)
    }

    /// [`Database::open`] with options: with [`OpenFlags::OFFLINE`] a catalogue name must
    /// already be cached; with [`OpenFlags::READ_ONLY`] every connection refuses writes.
    pub fn open_with_flags(path_or_name: impl AsRef<str>, flags: OpenFlags) -> Result<Database> {
        let db = Database::new_with_flags(flags);
        let probe = db.connect()?;
        probe.bind(path_or_name.as_ref())?;
        let (name, shared) = probe
            .bound_shared()
            .ok_or_else(|| Error::internal("bound model vanished"))?;
        Ok(Database {
            inner: Arc::new(Inner {
                models: Mutex::new(vec![(shared.model.path.clone(), Arc::downgrade(&shared))]),
                default: Some((name, shared)),
                flags,
            }),
        })
    }

    /// The options this database was made with.
    pub fn flags(&self) -> OpenFlags {
        self.inner.flags
    }

    /// A new connection: its own session, bound to the database's model if it has one.
    pub fn connect(&self) -> Result<Connection> {
        let conn = Connection::on(self.clone());
        if let Some((name, shared)) = &self.inner.default {
            conn.bind_shared(name, shared.clone());
        }
        Ok(conn)
    }

    /// The shared model at `path`, opening it if no connection holds it (or if the files
    /// of the one held changed since they were mapped).
    pub(crate) fn model(&self, path: &Path) -> Result<Arc<SharedModel>> {
        self.model_profile(path, None)
    }

    /// [`Database::model`] for a VINDEX3 container bound with a profile's variant
    /// selection (`None`: every baseline); each (path, profile) is its own shared model.
    pub(crate) fn model_profile(
        &self,
        path: &Path,
        profile: Option<&str>,
    ) -> Result<Arc<SharedModel>> {
        let mut key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(p) = profile {
            key.as_mut_os_string().push(format!("#profile={p}"));
        }
        let current = |all: &[(PathBuf, Weak<SharedModel>)]| {
            all.iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, w)| w.upgrade())
                .filter(|m| m.model.check_unchanged().is_ok())
        };
        {
            let mut all = self.inner.models.lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|(_, w)| w.strong_count() > 0);
            if let Some(m) = current(&all) {
                return Ok(m);
            }
        }
        let model = match profile {
            None => lql_storage::import::open(path)?,
            Some(p) => lql_storage::format::vindex3::open_model_profile(path, Some(p))?,
        };
        let shared = Arc::new(SharedModel::new(model));
        let mut all = self.inner.models.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = current(&all) {
            return Ok(m);
        }
        all.retain(|(k, _)| *k != key);
        all.push((key, Arc::downgrade(&shared)));
        Ok(shared)
    }
}

/// What an embedder running its own decode loops over the database's model needs (the HTTP
/// server's completions): the mapped model and its shared tokenizer.
impl Database {
    /// Bytes held in caches shared by the connections (the f32 layers INSERT optimises
    /// through: one copy per model, whatever the number of connections that INSERT).
    pub fn cache_bytes(&self) -> usize {
        let all = self.inner.models.lock().unwrap_or_else(|e| e.into_inner());
        let mut live: Vec<Arc<SharedModel>> = all.iter().filter_map(|(_, w)| w.upgrade()).collect();
        if let Some((_, d)) = &self.inner.default {
            if !live.iter().any(|m| Arc::ptr_eq(m, d)) {
                live.push(d.clone());
            }
        }
        live.iter().map(|m| m.dense_tail_bytes()).sum()
    }

    /// The model every new connection starts bound to (`None` for [`Database::new`]).
    pub fn default_model(&self) -> Option<(String, Arc<Model>)> {
        self.inner
            .default
            .as_ref()
            .map(|(name, shared)| (name.clone(), shared.model.clone()))
    }

    /// The default model as every connection shares it (tokenizer, identity, labels).
    pub(crate) fn default_shared(&self) -> Option<Arc<SharedModel>> {
        self.inner
            .default
            .as_ref()
            .map(|(_, shared)| shared.clone())
    }

    /// The default model's tokenizer, built once and shared with every connection.
    pub fn default_tokenizer(&self) -> Result<Arc<Tokenizer>> {
        match &self.inner.default {
            Some((_, shared)) => shared.tokenizer(),
            None => Err(Error::semantic("the database has no default model")),
        }
    }
}
