"""Connections, relations and the PEP 249 cursor."""

from __future__ import annotations

import os
import tempfile
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
    overload,
)

from . import _lql
from ._activations import ActivationCache, load_trace

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import polars as pl
    import pyarrow as pa

#: Statement parameters: a sequence for ``?`` placeholders, a dict for ``:name``.
Params = Optional[Union[Sequence[Any], Mapping[str, Any]]]
#: One row: cells are None, bool, int, float, str or list.
Row = Tuple[Any, ...]
#: PEP 249's column description: ``(name, type_code, None, None, None, None, None)``.
ColumnDescription = Tuple[str, str, None, None, None, None, None]


class Relation:
    """The rows of one statement.

    Rows stay in the engine until asked for: ``fetchall()`` / ``fetchone()`` /
    ``fetchmany()`` walk them as tuples (a cursor over the result), ``df()``, ``pl()`` and
    ``arrow()`` take every column at once through the Arrow C data interface, and
    ``fetchnumpy()`` gives a dict of numpy arrays.
    """

    def __init__(self, result: "_lql.QueryResult") -> None:
        self._result = result
        self._pos = 0

    # -- shape ---------------------------------------------------------------------------
    @property
    def columns(self) -> List[str]:
        """The column names."""
        return self._result.columns

    @property
    def types(self) -> List[str]:
        """The declared column types (``int``, ``float``, ``text``, ``bool``, ``list``, ``any``)."""
        return self._result.types

    @property
    def description(self) -> List[ColumnDescription]:
        """PEP 249: one ``(name, type_code, None, None, None, None, None)`` per column."""
        return [(n, t, None, None, None, None, None) for n, t in zip(self.columns, self.types)]

    @property
    def statement(self) -> str:
        """The statement's text."""
        return self._result.statement

    @property
    def fault(self) -> bool:
        """Whether the statement reported a fault it found (VERIFY with a FAILED row)."""
        return self._result.fault

    def __len__(self) -> int:
        return len(self._result)

    # -- tuples --------------------------------------------------------------------------
    def fetchone(self) -> Optional[Row]:
        """The next row, or None."""
        rows = self._result.rows(self._pos, self._pos + 1)
        if not rows:
            return None
        self._pos += 1
        return rows[0]

    def fetchmany(self, size: int = 1) -> List[Row]:
        """The next ``size`` rows."""
        rows = self._result.rows(self._pos, self._pos + max(0, int(size)))
        self._pos += len(rows)
        return rows

    def fetchall(self) -> List[Row]:
        """Every remaining row, as tuples."""
        rows = self._result.rows(self._pos)
        self._pos += len(rows)
        return rows

    def __iter__(self) -> Iterator[Row]:
        while True:
            chunk = self.fetchmany(1024)
            if not chunk:
                return
            yield from chunk

    # -- columnar ------------------------------------------------------------------------
    def __arrow_c_stream__(self, requested_schema: Optional[object] = None) -> object:
        """Arrow PyCapsule interface: the rows as an Arrow stream."""
        return self._result.__arrow_c_stream__(requested_schema)

    def __arrow_c_schema__(self) -> object:
        """Arrow PyCapsule interface: the schema."""
        return self._result.__arrow_c_schema__()

    def arrow(self) -> "pa.Table":
        """The rows as a ``pyarrow.Table`` (no per-value copies)."""
        import pyarrow as pa

        return pa.table(self._result)

    fetch_arrow_table = arrow

    def df(self) -> "pd.DataFrame":
        """The rows as a pandas DataFrame (through Arrow when pyarrow is installed)."""
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            import pandas as pd

            return pd.DataFrame(
                {name: self._result.column(i) for i, name in enumerate(self.columns)},
                columns=self.columns,
            )
        return self.arrow().to_pandas()

    fetchdf = df

    def pl(self) -> "pl.DataFrame":
        """The rows as a polars DataFrame."""
        import polars as pl

        return cast("pl.DataFrame", pl.from_arrow(self.arrow()))

    def fetchnumpy(self) -> Dict[str, "np.ndarray"]:
        """The rows as ``{column: numpy array}``."""
        import numpy as np

        out = {}
        for i, (name, ty) in enumerate(zip(self.columns, self.types)):
            values = self._result.column(i)
            if ty in ("int", "float", "bool") and None not in values:
                out[name] = np.asarray(values)
            else:
                out[name] = np.asarray(values, dtype=object)
        return out

    # -- display -------------------------------------------------------------------------
    def __repr__(self) -> str:
        from ._display import text_table

        return text_table(self)

    def _repr_html_(self) -> str:
        """The table (first 50 rows) for notebooks, below the relation's picture when it
        has one (see ``_repr_svg_``)."""
        from ._display import relation_html

        return relation_html(self)

    def _repr_svg_(self) -> Optional[str]:
        """For notebooks: the logit lens of a TRACE result (layers × positions, each cell the
        top-1 token shaded by its probability, as ``TRACE … SAVE 'x.svg'`` draws it), or the
        heat map of one head's rows of the ``attention`` table; None for other relations."""
        from ._display import relation_svg

        return relation_svg(self)

    def show(self, max_rows: int = 20) -> None:
        """Prints the rows as a table."""
        from ._display import text_table

        print(text_table(self, max_rows=max_rows))


class Database:
    """A model mapped once, shared by any number of connections (one per thread)."""

    def __init__(
        self, model: Optional[str] = None, *, offline: bool = False, read_only: bool = False
    ) -> None:
        """Opens ``model`` as :func:`connect` does, for several connections to share."""
        self._db = _lql.Database(model, offline, read_only)

    @property
    def model(self) -> Optional[str]:
        """The name of the model the database opened, if any."""
        return self._db.model

    def connect(self) -> "Connection":
        """A new connection (its own session) on this database."""
        return Connection(self, self._db.connect())


def connect(model: Optional[str] = None, *, offline: bool = False, read_only: bool = False) -> "Connection":
    """Opens ``model`` (a GGUF file, a model folder, a VINDEX3 container, or a catalogue
    name such as ``"smollm2-135m-instruct"``, fetched into the local cache on first use
    unless ``offline``) and returns a connection. ``None`` opens no model (``USE`` binds
    one). ``read_only`` refuses statements that write files or change the session's model."""
    return Database(model, offline=offline, read_only=read_only).connect()


class _Runner:
    """What Connection and Cursor share: running statements on a native connection."""

    _con: "_lql.Connection"

    def _run(self, sql: str, params: Params = None) -> Relation:
        if not isinstance(sql, str):
            raise TypeError("the statement is a str")
        return Relation(self._con.execute(sql, params))


class Connection(_Runner):
    """One session on a database: its bound model, patches and settings.

    ``execute`` returns the connection itself with the result pending, as DuckDB's does
    (``con.execute(sql).fetchall()``); ``sql`` returns a :class:`Relation`.
    """

    def __init__(self, database: Database, native: "_lql.Connection") -> None:
        self._database = database
        self._con = native
        self._last: Optional[Relation] = None

    # -- statements ----------------------------------------------------------------------
    def sql(self, query: str, params: Params = None) -> Relation:
        """Runs ``query`` (the last statement's rows when it holds several) and returns its
        rows. ``params``: a sequence for ``?`` placeholders, a dict for ``:name``."""
        return self._run(query, params)

    query = sql

    def execute(self, query: str, params: Params = None) -> "Connection":
        """Runs ``query``; fetch its rows with ``fetchall()``, ``df()``, ``arrow()`` …"""
        self._last = self._run(query, params)
        return self

    def executemany(self, query: str, seq_of_params: Iterable[Params]) -> "Connection":
        """Runs ``query`` once per parameter set; the last run's rows stay pending."""
        for params in seq_of_params:
            self._last = self._run(query, params)
        return self

    def _pending(self) -> Relation:
        if self._last is None:
            raise _lql.ProgrammingError("no statement has been executed on this connection")
        return self._last

    def fetchone(self) -> Optional[Row]:
        """The pending result's next row, or None."""
        return self._pending().fetchone()

    def fetchmany(self, size: int = 1) -> List[Row]:
        """The pending result's next ``size`` rows."""
        return self._pending().fetchmany(size)

    def fetchall(self) -> List[Row]:
        """The pending result's remaining rows."""
        return self._pending().fetchall()

    def df(self) -> "pd.DataFrame":
        """The pending result as a pandas DataFrame."""
        return self._pending().df()

    fetchdf = df

    def pl(self) -> "pl.DataFrame":
        """The pending result as a polars DataFrame."""
        return self._pending().pl()

    def arrow(self) -> "pa.Table":
        """The pending result as a ``pyarrow.Table``."""
        return self._pending().arrow()

    fetch_arrow_table = arrow

    def fetchnumpy(self) -> Dict[str, "np.ndarray"]:
        """The pending result as ``{column: numpy array}``."""
        return self._pending().fetchnumpy()

    @property
    def description(self) -> Optional[List[ColumnDescription]]:
        """PEP 249: the pending result's columns, or None before any statement."""
        return None if self._last is None else self._last.description

    # -- activations ---------------------------------------------------------------------
    @overload
    def run_with_cache(self, prompt: str) -> ActivationCache: ...  # type: ignore[overload-overlap]

    @overload
    def run_with_cache(self, prompt: Sequence[str]) -> List[ActivationCache]: ...

    def run_with_cache(
        self, prompt: Union[str, Sequence[str]]
    ) -> Union[ActivationCache, List[ActivationCache]]:
        """Runs ``prompt`` once and returns every activation TRACE records, at every position,
        as an :class:`ActivationCache` of numpy arrays (TransformerLens' names and shapes:
        ``cache["blocks.3.hook_resid_post"]`` is ``[pos, d_model]``). A list of prompts gives
        a list of caches. The arrays are the values ``TRACE … SAVE 'f.trace'`` writes, bit
        for bit."""
        if not isinstance(prompt, str):
            return [self.run_with_cache(p) for p in prompt]
        with tempfile.TemporaryDirectory(prefix="lql-cache-") as tmp:
            path = os.path.join(tmp, "run.trace")
            self._run("TRACE ? POSITIONS ALL SAVE ?", [prompt, path])
            return load_trace(path)

    # -- sessions ------------------------------------------------------------------------
    @property
    def database(self) -> Database:
        """The database this connection belongs to."""
        return self._database

    @property
    def bound_model(self) -> Optional[str]:
        """The model bound now (``USE`` changes it), if any."""
        return self._con.bound_model

    def cursor(self) -> "Cursor":
        """A PEP 249 cursor on a new connection to the same database (as DuckDB's cursor is):
        it shares the mapped model but not this connection's session."""
        return Cursor(self, self._con.duplicate())

    def duplicate(self) -> "Connection":
        """A new connection to the same database."""
        return Connection(self._database, self._con.duplicate())

    def interrupt(self) -> None:
        """Cancels the statement this connection is running (call it from another thread)."""
        self._con.interrupt()

    def commit(self) -> None:
        """PEP 249: statements take effect as they run (edits live in the session's overlay
        until ``SAVE PATCH``); nothing to commit."""
        self._check_open()

    def rollback(self) -> None:
        """PEP 249: not supported (raises ``NotSupportedError``)."""
        raise _lql.NotSupportedError(
            "rollback is not supported: edits are overlays; REMOVE PATCH or a new connection undoes them"
        )

    def _check_open(self) -> None:
        if self._con.closed:
            raise _lql.InterfaceError("the connection is closed")

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._con.closed

    def close(self) -> None:
        """Closes the connection; later calls raise ``InterfaceError``."""
        self._con.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"model={self.bound_model!r}"
        return f"<lql.Connection {state}>"


class Cursor(_Runner):
    """PEP 249 cursor: ``execute``, ``executemany``, ``fetchone``, ``fetchmany``,
    ``fetchall``, ``description``, ``rowcount``, ``arraysize``, ``close``."""

    arraysize = 1

    def __init__(self, connection: Connection, native: "_lql.Connection") -> None:
        self.connection = connection
        self._con = native
        self._last: Optional[Relation] = None

    def execute(self, operation: str, parameters: Params = None) -> "Cursor":
        """Runs ``operation``; fetch its rows from the cursor."""
        self._check_open()
        self._last = self._run(operation, parameters)
        return self

    def executemany(self, operation: str, seq_of_parameters: Iterable[Params]) -> "Cursor":
        """Runs ``operation`` once per parameter set; the last run's rows stay pending."""
        self._check_open()
        for params in seq_of_parameters:
            self._last = self._run(operation, params)
        return self

    def _pending(self) -> Relation:
        self._check_open()
        if self._last is None:
            raise _lql.ProgrammingError("no statement has been executed on this cursor")
        return self._last

    def fetchone(self) -> Optional[Row]:
        """The next row, or None."""
        return self._pending().fetchone()

    def fetchmany(self, size: Optional[int] = None) -> List[Row]:
        """The next ``size`` rows (``arraysize`` by default)."""
        return self._pending().fetchmany(self.arraysize if size is None else size)

    def fetchall(self) -> List[Row]:
        """The remaining rows."""
        return self._pending().fetchall()

    def df(self) -> "pd.DataFrame":
        """The pending result as a pandas DataFrame."""
        return self._pending().df()

    def arrow(self) -> "pa.Table":
        """The pending result as a ``pyarrow.Table``."""
        return self._pending().arrow()

    @property
    def description(self) -> Optional[List[ColumnDescription]]:
        """PEP 249: the pending result's columns, or None before any statement."""
        return None if self._last is None else self._last.description

    @property
    def rowcount(self) -> int:
        """PEP 249: the pending result's row count, -1 before any statement."""
        return -1 if self._last is None else len(self._last)

    def setinputsizes(self, sizes: object) -> None:
        """PEP 249: does nothing."""

    def setoutputsize(self, size: object, column: Optional[int] = None) -> None:
        """PEP 249: does nothing."""

    def _check_open(self) -> None:
        if self._con.closed:
            raise _lql.InterfaceError("the cursor is closed")

    def close(self) -> None:
        """Closes the cursor (its own connection); later calls raise ``InterfaceError``."""
        self._con.close()

    def __iter__(self) -> Iterator[Row]:
        return iter(self._pending())

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
