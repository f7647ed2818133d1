"""LQL from Python: a language model opened like a database.

>>> import lql
>>> con = lql.connect("smollm2-135m-instruct")
>>> con.sql("INFER 'The capital of France is' TOP 3").df()

``lql.connect`` opens a model (a GGUF file, a folder, a VINDEX3 container or a catalogue
name) and returns a :class:`Connection`; ``con.sql(...)`` returns a :class:`Relation` whose
rows come out as pandas (``.df()``), polars (``.pl()``), pyarrow (``.arrow()``), numpy
(``.fetchnumpy()``) or tuples (``.fetchall()``). The module is a PEP 249 (DB-API 2.0)
driver: ``con.cursor()``, ``cursor.execute(sql, params)``, ``cursor.description`` and the
standard exception tree, each exception carrying LQL's ``code``, ``kind``, ``span`` and
``help``. ``con.run_with_cache(prompt)`` gives the activations TRACE records as numpy arrays,
named as TransformerLens names them. See docs/python.md.
"""

from ._lql import (  # noqa: F401
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ParserError,
    ProgrammingError,
    Warning,
    __version__,
    error_codes,
    quote,
)
from ._activations import ActivationCache, load_trace  # noqa: F401
from ._connection import Connection, Cursor, Database, Relation, connect  # noqa: F401

#: PEP 249: the DB-API level this module implements.
apilevel = "2.0"
#: PEP 249: threads may share the module, not connections (open one per thread with
#: ``con.cursor()`` or ``Database.connect()``: they share the mapped model).
threadsafety = 1
#: PEP 249: ``?`` placeholders (``:name`` with a dict works too).
paramstyle = "qmark"

__all__ = [
    "connect",
    "Connection",
    "Cursor",
    "Database",
    "Relation",
    "ActivationCache",
    "load_trace",
    "quote",
    "error_codes",
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "ParserError",
    "NotSupportedError",
    "apilevel",
    "threadsafety",
    "paramstyle",
]
