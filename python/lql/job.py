"""Batch jobs: one statement over a file of prompts, into one Parquet file, resumably.

>>> from lql.job import run_job
>>> run_job("INFER ? TOP 3", "prompts.txt", "out.parquet")
JobResult(output='out.parquet', prompts=..., rows=..., chunks=..., chunks_resumed=0)

The statement takes one ``?`` parameter, bound to each prompt in turn; the output holds the
statement's rows with two leading columns, ``prompt_index`` (int64, the prompt's position
among the file's prompts) and ``prompt``. A prompt is a line of the file (UTF-8, split as
``str.splitlines()`` splits, as ``ray.data.read_text`` does), blank lines skipped.

The prompts run in chunks of ``chunk_size``; each finished chunk becomes a part file (Arrow
IPC, written to a temporary name, fsynced, renamed) in the work directory
``<output>.lql-job/`` next to the output, whose ``manifest.json`` records the job's identity:
the statement, the model (a file's size and mtime, the session's patches and steering), the
engine version, the prompts file's sha256 and the chunk size. Run the same job again after a
kill and it skips the finished parts; a work directory of another job is refused. At the end
the parts are written, in order, into the output (a temporary name, renamed last) and the
work directory is removed. The Parquet bytes depend on the rows alone (fixed row groups,
fixed writer settings), so a job killed and resumed any number of times writes the same
file, byte for byte, as one that ran straight through; ``lql.ray`` writes it too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from . import _lql
from ._connection import Connection, connect

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("lql.job writes Parquet through pyarrow: pip install 'lql[parquet]'") from e

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; run one process per job.
    fcntl = None

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_CHUNK_SIZE = 64
DEFAULT_ROW_GROUP_SIZE = 65536
DEFAULT_COMPRESSION = "zstd"
#: Columns every output starts with.
KEY_COLUMNS = ("prompt_index", "prompt")

_MANIFEST = "manifest.json"
_WORK_SUFFIX = ".lql-job"
_FORMAT = 1


class JobError(RuntimeError):
    """A job that cannot run: another job's work directory, a prompt the statement failed
    on, columns that change type between prompts, a job already running."""


@dataclass(frozen=True)
class Progress:
    """Where a job stands; passed to the ``progress`` callback after every prompt it runs
    (and after each part an earlier run had finished)."""

    prompts_done: int
    prompts: int
    chunks_done: int
    chunks: int
    rows: int


@dataclass(frozen=True)
class JobResult:
    """A finished job: the output path, how many prompts, rows and chunks it holds, and how
    many chunks an earlier, interrupted run had already finished."""

    output: str
    prompts: int
    rows: int
    chunks: int
    chunks_resumed: int


# -- prompts -------------------------------------------------------------------------------
def prompts_of(data: bytes) -> List[str]:
    """The prompts in a file's bytes: its UTF-8 lines as ``str.splitlines()`` splits them,
    blank lines skipped (what ``ray.data.read_text`` gives)."""
    return [line for line in data.decode("utf-8").splitlines() if line.strip()]


def read_prompts(path: str) -> List[str]:
    """The prompts of a text file (see :func:`prompts_of`)."""
    with open(path, "rb") as f:
        return prompts_of(f.read())


# -- running prompts -----------------------------------------------------------------------
def check_statement(con: Connection, statement: str) -> None:
    """Raises ``ValueError`` unless ``statement`` is a str taking exactly one parameter."""
    if not isinstance(statement, str):
        raise TypeError("the statement is a str")
    count = con._con.parameter_count(statement)
    if count != 1:
        raise ValueError(
            f"a job's statement takes exactly one parameter (the prompt, as ?); {statement!r} takes {count}"
        )


def prompt_rows(con: Connection, statement: str, index: int, prompt: str):
    """The statement's rows for one prompt as a ``pyarrow.Table``, led by ``prompt_index``
    and ``prompt``."""
    try:
        table = con.sql(statement, [prompt]).arrow()
    except _lql.Error as e:
        raise JobError(f"prompt {index} ({prompt[:60]!r}) failed: {e}") from e
    clash = set(KEY_COLUMNS) & set(table.column_names)
    if clash:
        raise ValueError(f"the statement's rows have a column named {sorted(clash)[0]!r}, which a job adds")
    n = table.num_rows
    table = table.add_column(0, "prompt", pa.array([prompt] * n, pa.string()))
    table = table.add_column(0, "prompt_index", pa.array([index] * n, pa.int64()))
    return table.replace_schema_metadata(None)


def concat(tables: Sequence):
    """Tables of one statement's rows as one (a column whose cells were NULL, or integers,
    in some prompts takes the wider type)."""
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
        raise JobError(f"the statement's columns change type between prompts: {e}") from e


def unify(schemas: Iterable):
    """The schema the tables of one job are cast to (see :func:`concat`); with no tables,
    the two leading columns alone."""
    schemas = list(schemas)
    if not schemas:
        return pa.schema([("prompt_index", pa.int64()), ("prompt", pa.string())])
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
        raise JobError(f"the statement's columns change type between prompts: {e}") from e


def run_prompts(con: Connection, statement: str, indices: Sequence[int], prompts: Sequence[str]):
    """The rows of ``statement`` over ``prompts`` (numbered by ``indices``), in order, as
    one ``pyarrow.Table``."""
    return concat([prompt_rows(con, statement, int(i), p) for i, p in zip(indices, prompts)])


# -- files ---------------------------------------------------------------------------------
def _fsync_dir(path: str) -> None:
    if os.name == "posix":
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_atomic(path: str, write: Callable, tmp: Optional[str] = None) -> None:
    """Writes ``path`` through ``write(file)`` under a temporary name (``path.tmp`` unless
    given), fsynced, then renamed: a kill leaves the old file or the new one, never half."""
    tmp = tmp or path + ".tmp"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


class ParquetSink:
    """Writes tables into one Parquet file in row groups of exactly ``row_group_size`` rows
    (the last one shorter), whatever sizes the tables come in, with fixed writer settings:
    the file's bytes depend on the rows and the schema alone."""

    def __init__(self, file, schema, row_group_size: int = DEFAULT_ROW_GROUP_SIZE, compression: str = DEFAULT_COMPRESSION):
        self._schema = schema
        self._size = row_group_size
        self._pending: list = []
        self._rows = 0
        self._writer = pq.ParquetWriter(file, schema, compression=compression, version="2.6", write_statistics=True)

    def write(self, table) -> None:
        self._pending.append(table.cast(self._schema))
        self._rows += table.num_rows
        while self._rows >= self._size:
            self._flush(self._size)

    def _flush(self, n: int) -> None:
        buffered = pa.concat_tables(self._pending)
        # One contiguous chunk per column: pages are cut where the rows are, not where the
        # tables that brought them happened to end.
        self._writer.write_table(buffered.slice(0, n).combine_chunks(), row_group_size=n)
        self._pending = [buffered.slice(n)]
        self._rows -= n

    def close(self) -> None:
        if self._rows:
            self._flush(self._rows)
        self._writer.close()

    def __enter__(self) -> "ParquetSink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_parquet(
    path: str,
    schema,
    tables: Iterable,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    compression: str = DEFAULT_COMPRESSION,
    tmp: Optional[str] = None,
) -> int:
    """Writes ``tables`` (cast to ``schema``) into the Parquet file ``path`` through a
    :class:`ParquetSink`, under a temporary name renamed last; returns the rows written."""
    rows = 0

    def write(f):
        nonlocal rows
        with ParquetSink(f, schema, row_group_size, compression) as sink:
            for table in tables:
                sink.write(table)
                rows += table.num_rows

    _write_atomic(path, write, tmp)
    return rows


# -- the work directory --------------------------------------------------------------------
def _part_path(work: str, chunk: int) -> str:
    return os.path.join(work, f"part-{chunk:06d}.arrow")


def _write_part(path: str, table) -> None:
    def write(f):
        with pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)

    _write_atomic(path, write)


def _read_part(path: str):
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()


def _part_schema(path: str):
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).schema


def _model_identity(con: Connection) -> dict:
    """What the rows depend on besides the statement and the prompts."""
    model = con.bound_model
    identity = {"model": model, "lql_version": _lql.__version__}
    if model and os.path.isfile(model):
        st = os.stat(model)
        identity["model_file"] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    for what in ("PATCHES", "STEERING"):
        identity[what.lower()] = [list(row) for row in con.sql(f"SHOW {what}").fetchall()]
    return json.loads(json.dumps(identity, default=str))


def _open_work(work: str, manifest: dict) -> Optional[int]:
    """Creates the work directory with ``manifest``, or checks that the one there holds
    this job; returns the lock held on it."""
    path = os.path.join(work, _MANIFEST)
    if os.path.exists(work) and not os.path.exists(path):
        if any(not name.startswith(_MANIFEST) for name in os.listdir(work)):
            raise JobError(f"{work} exists and is not a job's work directory; remove it or choose another output")
    os.makedirs(work, exist_ok=True)
    lock = _lock(work)
    try:
        _check_manifest(path, manifest)
    except BaseException:
        _unlock(lock)
        raise
    return lock


def _check_manifest(path: str, manifest: dict) -> None:
    """Writes ``manifest`` into a work directory that holds no parts; refuses one whose
    parts belong to another job."""
    work = os.path.dirname(path)
    if not any(name.startswith("part-") and name.endswith(".arrow") for name in os.listdir(work)):
        text = json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")
        _write_atomic(path, lambda f: f.write(text))
        return
    with open(path, encoding="utf-8") as f:
        found = json.load(f)
    if found != manifest:
        changed = sorted(k for k in manifest.keys() | found.keys() if manifest.get(k) != found.get(k))
        raise JobError(
            f"{work} holds the parts of another job (it differs in {', '.join(changed)}); "
            "run that job again to finish it, or remove the directory to start this one"
        )


def _lock(work: str) -> Optional[int]:
    """An advisory lock on the work directory (the OS drops it when the process ends)."""
    if fcntl is None:
        return None
    fd = os.open(work, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise JobError(f"another process is running the job in {work}") from None
    return fd


def _unlock(lock: Optional[int]) -> None:
    if lock is not None:
        os.close(lock)


def _check_paths(prompts_path: str, output: str) -> Tuple[str, str]:
    prompts_path, output = os.fspath(prompts_path), os.fspath(output)
    if not os.path.isfile(prompts_path):
        raise FileNotFoundError(f"no prompts file {prompts_path!r}")
    if os.path.isdir(output):
        raise IsADirectoryError(f"the output {output!r} is a directory")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"the output's folder {parent!r} does not exist")
    if os.path.exists(output) and os.path.samefile(output, prompts_path):
        raise ValueError("the output would overwrite the prompts file")
    if os.path.abspath(prompts_path).startswith(os.path.abspath(output + _WORK_SUFFIX) + os.sep):
        raise ValueError("the prompts file is inside the job's work directory, which the job removes")
    return prompts_path, output


def _chunks(count: int, size: int) -> Iterator[Tuple[int, int, int]]:
    for k, start in enumerate(range(0, count, size)):
        yield k, start, min(start + size, count)


# -- the job -------------------------------------------------------------------------------
def run_job(
    statement: str,
    prompts_path: str,
    output: str,
    *,
    model: Optional[str] = DEFAULT_MODEL,
    connection: Optional[Connection] = None,
    offline: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    compression: str = DEFAULT_COMPRESSION,
    progress: Optional[Callable[[Progress], None]] = None,
) -> JobResult:
    """Runs ``statement`` (one ``?``: the prompt) over every prompt of ``prompts_path`` into
    the Parquet file ``output``, resuming an interrupted run of the same job.

    The job opens ``model`` read-only (statements that write files are refused), or runs on
    ``connection`` (its patches and steering count as part of the job's identity).
    ``chunk_size`` prompts make a part, the unit a resumed job skips; ``row_group_size`` and
    ``compression`` are the Parquet file's. ``progress(Progress)`` is called after every
    prompt. Raises ``FileNotFoundError``, ``IsADirectoryError``, ``ValueError`` for bad
    arguments and :class:`JobError` when the job cannot run or a prompt fails."""
    prompts_path, output = _check_paths(prompts_path, output)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError("chunk_size is a positive int")
    if not isinstance(row_group_size, int) or row_group_size < 1:
        raise ValueError("row_group_size is a positive int")
    con = connection if connection is not None else connect(model, offline=offline, read_only=True)
    try:
        check_statement(con, statement)
        return _run(con, statement, prompts_path, output, chunk_size, row_group_size, compression, progress)
    finally:
        if connection is None:
            con.close()


def _run(con, statement, prompts_path, output, chunk_size, row_group_size, compression, progress) -> JobResult:
    with open(prompts_path, "rb") as f:
        data = f.read()
    prompts = prompts_of(data)
    manifest = {
        "format": _FORMAT,
        "statement": statement,
        "prompts_sha256": hashlib.sha256(data).hexdigest(),
        "prompts": len(prompts),
        "chunk_size": chunk_size,
        **_model_identity(con),
    }
    work = output + _WORK_SUFFIX
    lock = _open_work(work, manifest)
    try:
        chunks = list(_chunks(len(prompts), chunk_size))
        parts, rows, resumed = _run_chunks(con, statement, prompts, chunks, work, progress)
        _assemble(parts, output, work, row_group_size, compression)
        shutil.rmtree(work)
    finally:
        _unlock(lock)
    return JobResult(output, len(prompts), rows, len(chunks), resumed)


def _run_chunks(con, statement, prompts, chunks, work, progress) -> Tuple[List[str], int, int]:
    """Runs the chunks that have no part yet; returns every part, the rows, and how many
    parts an earlier run had finished."""
    for name in os.listdir(work):
        if name.endswith(".tmp"):
            os.remove(os.path.join(work, name))  # a write a kill cut short
    parts, rows, done, resumed = [], 0, 0, 0

    def report(prompts_done: int, rows_done: int) -> None:
        if progress is not None:
            progress(Progress(prompts_done, len(prompts), done, len(chunks), rows_done))

    for k, start, stop in chunks:
        path = _part_path(work, k)
        if os.path.exists(path):
            resumed += 1
        else:
            tables, chunk_rows = [], 0
            for index in range(start, stop):
                tables.append(prompt_rows(con, statement, index, prompts[index]))
                chunk_rows += tables[-1].num_rows
                if index + 1 < stop:
                    report(index + 1, rows + chunk_rows)
            _write_part(path, concat(tables))
        parts.append(path)
        rows += _read_part(path).num_rows
        done += 1
        report(stop, rows)
    return parts, rows, resumed


def _assemble(parts: List[str], output: str, work: str, row_group_size: int, compression: str) -> None:
    """Writes the parts, in order, into ``output``."""
    schema = unify(_part_schema(p) for p in parts)
    tables = (_read_part(p) for p in parts)
    write_parquet(output, schema, tables, row_group_size, compression, tmp=os.path.join(work, "output.parquet.tmp"))

