"""The connection, results, parameters, errors, interrupts and threads."""

import math
import os
import signal
import threading
import time

import numpy as np
import pytest

import lql
from conftest import MODEL, require

PROMPT = "The capital of France is"


def test_connect_infer_dataframe():
    pd = require("pandas")
    df = lql.connect(MODEL).sql(f"INFER {lql.quote(PROMPT)} TOP 3").df()
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == ["rank", "token", "token_id", "prob", "logit"]
    assert df["token"][0] == " Paris" and df["rank"].tolist() == [1, 2, 3]


def test_positional_and_named_params(con):
    a = con.sql("INFER ? TOP 2", [PROMPT]).fetchall()
    b = con.sql("INFER :p TOP 2", {"p": PROMPT}).fetchall()
    c = con.sql(f"INFER {lql.quote(PROMPT)} TOP 2").fetchall()
    assert a == b == c
    assert con.sql("SELECT layer FROM layers WHERE layer < ?", (3,)).fetchall() == [(0,), (1,), (2,)]
    # Values are bound, never pasted: a quote in the value is just text.
    assert con.sql("TOKENIZE ?", ["it's \"quoted\""]).fetchall()


def test_param_errors(con):
    with pytest.raises(lql.ProgrammingError) as e:
        con.sql("INFER ? TOP 2", [])
    assert e.value.code.startswith("LQL-E")
    with pytest.raises(TypeError):
        con.sql("INFER ? TOP 2", PROMPT)  # a str is not a parameter sequence
    with pytest.raises(TypeError):
        con.sql("INFER ? TOP 2", [object()])


def test_result_types_and_fetch(con):
    rel = con.sql("GENERATE ? MAX 4", [PROMPT])
    assert rel.columns == ["text", "token_ids", "finish_reason", "prompt_tokens", "generated_tokens"]
    assert rel.types == ["text", "list", "text", "int", "int"]
    assert [d[0] for d in rel.description] == rel.columns
    row = rel.fetchone()
    assert isinstance(row, tuple) and isinstance(row[0], str)
    assert isinstance(row[1], list) and all(isinstance(t, int) for t in row[1])
    assert rel.fetchone() is None and rel.fetchall() == []

    rel = con.sql("SELECT layer, feature FROM features WHERE layer = 0 LIMIT 5")
    assert len(rel) == 5
    assert rel.fetchmany(2) == [(0, 0), (0, 1)]
    assert len(rel.fetchall()) == 3
    assert [r for r in con.sql("SELECT layer FROM layers LIMIT 2")] == [(0,), (1,)]


def test_arrow_polars_numpy(con):
    pa = require("pyarrow")
    pl = require("polars")
    rel = con.sql("GENERATE ? MAX 4", [PROMPT])
    t = rel.arrow()
    assert isinstance(t, pa.Table) and t.num_rows == 1
    assert t.schema.field("token_ids").type == pa.list_(pa.int64())
    assert t.schema.field("prompt_tokens").type == pa.int64()
    assert t.column("token_ids").to_pylist() == [rel.fetchone()[1]]
    assert isinstance(rel.pl(), pl.DataFrame)

    inf = con.sql("INFER ? TOP 5", [PROMPT])
    arrays = inf.fetchnumpy()
    assert arrays["prob"].dtype == np.float64 and arrays["rank"].dtype == np.int64
    tuples = inf.fetchall()
    assert arrays["prob"].tolist() == [r[3] for r in tuples]
    # Stats: a column of mixed kinds comes out as text, every cell kept.
    stats = con.sql("STATS").arrow()
    assert stats.num_rows == len(con.sql("STATS").fetchall())


def test_null_and_float_cells(con):
    rows = con.sql("TRACE ? FOR ' Paris' LAYERS 0-1", [PROMPT]).fetchall()
    emb = rows[0]
    # The embedding row: no layer, no attention/FFN contribution.
    assert emb[0] is None and emb[3] is None and emb[4] is None
    t = con.sql("TRACE ? FOR ' Paris' LAYERS 0-1", [PROMPT]).arrow()
    assert t.column("attn_contrib").null_count == 1 and t.column("layer").null_count == 1
    assert all(isinstance(v, float) and math.isfinite(v) for v in t.column("prob").to_pylist())


def test_errors_carry_code_kind_span_help(con):
    with pytest.raises(lql.ParserError) as e:
        con.sql("SELEC 1")
    err = e.value
    assert isinstance(err, lql.ProgrammingError) and isinstance(err, lql.DatabaseError)
    assert isinstance(err, lql.Error)
    assert (err.code, err.kind, err.span) == ("LQL-E0101", "syntax", (0, 5))
    assert err.help and "SELECT" in err.help[0]

    with pytest.raises(lql.ProgrammingError) as e:
        con.sql("SELECT nope FROM layers")
    assert e.value.kind == "semantic" and e.value.code == "LQL-E0208"
    assert e.value.span is not None

    with pytest.raises(lql.DatabaseError) as e:
        con.sql("USE '/nonexistent/model.gguf'")
    assert e.value.code.startswith("LQL-E0")
    codes = dict(lql.error_codes())
    for ex in (err, e.value):
        assert ex.code in codes


def test_unbound_and_closed():
    con = lql.connect()
    with pytest.raises(lql.ProgrammingError):
        con.sql("INFER 'x'")
    con.close()
    with pytest.raises(lql.InterfaceError):
        con.sql("STATS")


def test_dbapi_cursor(con):
    assert lql.apilevel == "2.0" and lql.paramstyle == "qmark" and lql.threadsafety == 1
    cur = con.cursor()
    cur.execute("SELECT layer FROM layers WHERE layer < ?", [4])
    assert cur.description[0][0] == "layer" and cur.rowcount == 4
    assert cur.fetchone() == (0,)
    cur.arraysize = 2
    assert cur.fetchmany() == [(1,), (2,)]
    assert cur.fetchall() == [(3,)]
    cur.executemany("INFER ? TOP 1", [["a"], ["b"]])
    assert cur.rowcount == 1
    con.commit()
    with pytest.raises(lql.NotSupportedError):
        con.rollback()
    cur.close()
    with pytest.raises(lql.InterfaceError):
        cur.execute("STATS")
    # The cursor had its own session; the connection is untouched.
    assert con.sql("SELECT count(*) FROM layers").fetchone() == (30,)


def test_execute_returns_connection(con):
    assert con.execute("INFER ? TOP 2", [PROMPT]).fetchall()[0][1] == " Paris"
    assert con.execute("SELECT count(*) FROM layers").fetchone() == (30,)


def test_interrupt_from_another_thread(con):
    threading.Timer(0.5, con.interrupt).start()
    t0 = time.monotonic()
    with pytest.raises(lql.OperationalError) as e:
        con.sql("GENERATE 'Once upon a time' MAX 4000")
    assert e.value.kind == "interrupted"
    assert time.monotonic() - t0 < 30
    assert con.sql("INFER ? TOP 1", [PROMPT]).fetchone()[1] == " Paris"


def test_keyboard_interrupt_leaves_connection_usable(con):
    """SIGINT during a long statement raises KeyboardInterrupt, soon, and the connection
    runs the next statement."""
    pid = os.getpid()
    threading.Timer(0.5, lambda: os.kill(pid, signal.SIGINT)).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        con.sql("GENERATE 'Once upon a time' MAX 4000")
    assert time.monotonic() - t0 < 30
    assert con.sql("INFER ? TOP 1", [PROMPT]).fetchone()[1] == " Paris"


def test_threads_on_two_connections_of_one_database(db):
    """Two threads, two connections of one database: both run at once (the GIL is released
    while a statement runs) and each gets the single-threaded answer."""
    expected = {p: db.connect().sql("GENERATE ? MAX 12", [p]).fetchone()[0] for p in ("The sky is", "Paris is")}
    results, errors = {}, []

    def work(prompt):
        try:
            c = db.connect()
            for _ in range(3):
                results.setdefault(prompt, []).append(c.sql("GENERATE ? MAX 12", [prompt]).fetchone()[0])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    busy = []
    ticker_stop = threading.Event()

    def ticker():
        while not ticker_stop.is_set():
            busy.append(time.monotonic())
            time.sleep(0.01)

    tick = threading.Thread(target=ticker)
    tick.start()
    threads = [threading.Thread(target=work, args=(p,)) for p in expected]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ticker_stop.set()
    tick.join()
    assert not errors, errors
    for p, texts in results.items():
        assert texts == [expected[p]] * 3
    # The Python ticker kept running while statements ran: the GIL was free.
    assert len(busy) > 10


def test_activations_equal_trace_file_bit_for_bit(con, tmp_path):
    """run_with_cache's arrays for a 100-token prompt are the values TRACE … SAVE writes."""
    words = "the quick brown fox jumps over the lazy dog and then".split()
    prompt = " ".join(words[i % len(words)] for i in range(100))
    ids = con.sql("TOKENIZE ?", [prompt]).fetchall()
    assert len(ids) >= 100

    cache = con.run_with_cache(prompt)
    path = tmp_path / "x.trace"
    con.sql("TRACE ? POSITIONS ALL SAVE ?", [prompt, str(path)])
    raw = path.read_bytes()

    # The file read independently with numpy, as docs/trace.md shows.
    import json

    n = int.from_bytes(raw[16:24], "little")
    header = json.loads(raw[24 : 24 + n])
    base = -(-(24 + n) // 64) * 64
    ref = {
        a["name"]: np.frombuffer(raw, "<f4", int(np.prod(a["shape"])), base + a["offset"]).reshape(a["shape"])
        for a in header["arrays"]
    }
    assert len(cache.positions) == len(ids) and cache.n_layers == 30
    for name, arr in ref.items():
        got = cache.stack({"embedding": "embed"}.get(name, name))
        assert got.shape == arr.shape and got.dtype == np.float32, name
        assert np.array_equal(got.view(np.uint32), arr.view(np.uint32)), name
    # Per-layer names are views of the same buffers.
    assert np.shares_memory(cache["blocks.5.hook_resid_post"], cache.stack("resid_post"))
    assert np.array_equal(cache["blocks.0.hook_resid_pre"], ref["embedding"])
    assert np.array_equal(cache["blocks.7.hook_resid_pre"], ref["residual"][6])
    assert cache["blocks.2.attn.hook_pattern"].shape == (9, len(ids), len(ids))
    # The saved file opens as the same arrays.
    again = lql.load_trace(path)
    assert np.array_equal(again.stack("resid_post"), cache.stack("resid_post"))
    assert again.prompt == prompt


def test_damaged_trace_file_is_refused(tmp_path):
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"LQLTRACE" + b"\x01\x00\x00\x00" + b"\x00" * 4 + (10**12).to_bytes(8, "little"))
    with pytest.raises(lql.DataError) as e:
        lql.load_trace(bad)
    assert "bad.trace" in str(e.value)


def test_batch_of_prompts(con):
    caches = con.run_with_cache(["Hello", "The sky is"])
    assert [c.prompt for c in caches] == ["Hello", "The sky is"]
    assert caches[1].stack("resid_post").shape[1] == len(con.sql("TOKENIZE 'The sky is'").fetchall())
