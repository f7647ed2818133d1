"""Type stubs for ``lql._lql``, the native half of the ``lql`` package (python/src/*.rs).

The pure-Python modules wrap these objects: use ``lql.connect``, ``lql.Database`` and
``lql.Relation`` rather than the classes here.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np

#: The engine's version (the crate's ``CARGO_PKG_VERSION``).
__version__: str

_Params = Optional[Union[Sequence[Any], Mapping[str, Any]]]
#: A cell: NULL, bool, int, float, text or a list of cells.
_Cell = Any

class Database:
    """A database: a model (or none) mapped once and shared by its connections."""

    def __init__(
        self, model: Optional[str] = None, offline: bool = False, read_only: bool = False
    ) -> None:
        """Opens ``model`` (a GGUF file, a folder, a VINDEX3 container or a catalogue name);
        ``None`` gives a database with no model bound (``USE …`` binds one). ``offline``:
        never fetch a catalogue model; ``read_only``: refuse statements that write files or
        change the session's model."""
    def connect(self) -> Connection:
        """A new connection to this database (its own session: bound model, patches, settings)."""
    @property
    def model(self) -> Optional[str]:
        """The name of the model the database opened, if any."""

class Connection:
    """One session on a database."""

    def execute(self, sql: str, params: _Params = None) -> QueryResult:
        """Runs ``sql`` (with the GIL released; Ctrl-C interrupts it) and returns the rows of
        its last statement. With ``params`` (a sequence for ``?``, a dict for ``:name``) the
        text must hold one statement, and the values are bound into the prepared plan, never
        pasted into the text."""
    def parameter_count(self, sql: str) -> int:
        """The parameters a statement takes (0 for none)."""
    def interrupt(self) -> None:
        """Cancels the statement this connection is running (from another thread)."""
    @property
    def bound_model(self) -> Optional[str]:
        """The model bound now, if any."""
    def duplicate(self) -> Connection:
        """A new connection to the same database (shares the mapped model)."""
    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
    def close(self) -> None:
        """Closes the connection; later calls raise ``InterfaceError``."""

class QueryResult:
    """The rows of one statement, kept in the engine until asked for."""

    @property
    def columns(self) -> List[str]:
        """The column names."""
    @property
    def types(self) -> List[str]:
        """The declared column types (``int``, ``float``, ``text``, ``bool``, ``list``, ``any``)."""
    @property
    def statement(self) -> str:
        """The statement's text."""
    @property
    def fault(self) -> bool:
        """Whether the statement reported a fault it found (VERIFY with a FAILED row)."""
    def __len__(self) -> int: ...
    def rows(self, start: int = 0, stop: Optional[int] = None) -> List[Tuple[_Cell, ...]]:
        """Rows ``start .. stop`` as a list of tuples (cells: None, bool, int, float, str, list)."""
    def column(self, index: int) -> List[_Cell]:
        """One column's cells as a list (ValueError when ``index`` is out of range)."""
    def __arrow_c_schema__(self) -> object:
        """Arrow PyCapsule interface: the schema."""
    def __arrow_c_stream__(self, requested_schema: Optional[object] = None) -> object:
        """Arrow PyCapsule interface: the rows as a stream of one record batch (a requested
        schema is not honoured; the consumer casts)."""

class _LoadedTrace(TypedDict):
    arrays: Dict[str, np.ndarray]
    tokens: List[int]
    positions: List[int]
    meta: str
    hidden: int
    ffn: int
    n_heads: int
    n_layers: int
    context: int

def load_trace(path: str) -> _LoadedTrace:
    """Loads a ``.trace`` file with the engine's checked reader: its arrays as numpy arrays
    that own the loaded buffers, the prompt's token ids, the kept positions, the meta JSON
    text and the model's dimensions. A damaged or hostile file raises ``DataError``."""

def quote(text: str) -> str:
    """An LQL string literal for arbitrary text (quoted and escaped)."""

def error_codes() -> List[Tuple[str, str]]:
    """The registry of error codes: ``[(code, meaning), …]``."""

class Warning(Exception):
    """PEP 249: important warnings."""

class Error(Exception):
    """PEP 249: the base of LQL's errors. Raised from an engine error, it carries its
    diagnosis (errors raised by the Python layer, such as a closed connection, do not)."""

    #: The error's code, e.g. ``"LQL-E0201"``.
    code: str
    #: Its kind: ``syntax``, ``semantic``, ``unsupported``, ``io``, ``interrupted``,
    #: ``format`` or ``internal``.
    kind: str
    #: The message alone.
    message: str
    #: ``(start, end)`` byte offsets in the statement text, or None.
    span: Optional[Tuple[int, int]]
    #: Hints, one string each.
    help: List[str]

class InterfaceError(Error):
    """PEP 249: misuse of the interface (a closed connection or cursor)."""

class DatabaseError(Error):
    """PEP 249: errors of the engine."""

class DataError(DatabaseError):
    """A malformed, hostile or inconsistent file (kind ``format``)."""

class OperationalError(DatabaseError):
    """Reading or writing a file failed, the statement was interrupted, or the connection is
    busy (kinds ``io``, ``interrupted``; code ``LQL-E0202``)."""

class IntegrityError(DatabaseError):
    """PEP 249: integrity errors."""

class InternalError(DatabaseError):
    """A bug in LQL (kind ``internal``)."""

class ProgrammingError(DatabaseError):
    """The statement means nothing here: no model bound, unknown column, wrong parameters …
    (kind ``semantic``)."""

class ParserError(ProgrammingError):
    """The text does not parse (kind ``syntax``)."""

class NotSupportedError(DatabaseError):
    """A statement or feature that is not built (yet) or not available for this model (kind
    ``unsupported``)."""
