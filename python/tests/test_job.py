"""Batch jobs: rows, determinism, resuming after SIGKILL, refusals, the CLI."""

import fcntl
import os
import random
import signal
import subprocess
import sys

import pytest

import lql
from conftest import MODEL, require
from lql.job import JobError, prompts_of, read_prompts, run_job

pa = require("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "prompts.txt")
STATEMENT = "INFER ? TOP 3"
COLUMNS = ["prompt_index", "prompt", "rank", "token", "token_id", "prob", "logit"]

# Runs a job that kills itself (SIGKILL) when it has done the prompts given by argv[5].
CHILD = """
import os, signal, sys
from lql.job import run_job
statement, prompts, output, chunk_size, kill_at = sys.argv[1:]

def progress(p):
    if p.prompts_done == int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)

run_job(statement, prompts, output, model=os.environ["LQL_TEST_MODEL"], chunk_size=int(chunk_size), progress=progress)
"""


class Stop(Exception):
    pass


def prompts_file(tmp_path, n, name="prompts.txt"):
    path = tmp_path / name
    path.write_text("\n".join(read_prompts(DATA)[:n]) + "\n", encoding="utf-8")
    return str(path)


def stop_at(n):
    """A progress callback that interrupts the job once ``n`` prompts are done."""

    def progress(p):
        if p.prompts_done == n:
            raise Stop

    return progress


def parts(output):
    work = output + ".lql-job"
    return sorted(n for n in os.listdir(work) if n.startswith("part-") and n.endswith(".arrow"))


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_prompts_are_non_blank_lines():
    data = "a\r\nb\n\n \t \r\nc\u2028d \x0ce\n".encode("utf-8")
    assert prompts_of(data) == ["a", "b", "c", "d ", "e"]
    assert len(read_prompts(DATA)) == 200


def test_job_rows(tmp_path, con):
    src = prompts_file(tmp_path, 10)
    out = str(tmp_path / "out.parquet")
    seen = []
    result = run_job(STATEMENT, src, out, model=MODEL, chunk_size=4, progress=seen.append)
    assert result == lql.job.JobResult(out, prompts=10, rows=30, chunks=3, chunks_resumed=0)
    assert not os.path.exists(out + ".lql-job")
    assert [p.prompts_done for p in seen] == list(range(1, 11))
    assert [p.chunks_done for p in seen] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 3]
    assert seen[-1].rows == 30 and seen[-1].prompts == 10 and seen[-1].chunks == 3

    table = pq.read_table(out)
    assert table.column_names == COLUMNS
    assert table.schema.field("prompt_index").type == pa.int64()
    prompts = read_prompts(src)
    expected = []
    for i, prompt in enumerate(prompts):
        expected += [(i, prompt) + row for row in con.sql(STATEMENT, [prompt]).fetchall()]
    assert [tuple(r.values()) for r in table.to_pylist()] == expected


def test_bytes_depend_on_rows_alone(tmp_path):
    src = prompts_file(tmp_path, 12)
    outs = [str(tmp_path / f"out{c}.parquet") for c in (1, 5, 12)]
    for c, out in zip((1, 5, 12), outs):
        run_job(STATEMENT, src, out, model=MODEL, chunk_size=c, row_group_size=7)
    assert read_bytes(outs[0]) == read_bytes(outs[1]) == read_bytes(outs[2])
    assert pq.ParquetFile(outs[0]).metadata.num_row_groups == 6  # 36 rows in groups of 7


def test_killed_job_resumes_byte_identical(tmp_path):
    n, chunk = 60, 4
    src = prompts_file(tmp_path, n)
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    run_job(STATEMENT, src, a, model=MODEL, chunk_size=chunk)

    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    first = rng.randrange(1, n)
    second = rng.randrange(first + 1, n + 1)  # n: every part written, killed before the output
    env = dict(os.environ, LQL_TEST_MODEL=MODEL)
    for kill_at in (first, second):
        child = subprocess.run(
            [sys.executable, "-c", CHILD, STATEMENT, src, b, str(chunk), str(kill_at)],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert child.returncode == -signal.SIGKILL, (seed, child.stderr)
        assert not os.path.exists(b)
        assert len(parts(b)) == kill_at // chunk, seed
        if kill_at == first:
            # A part write a kill cut short: the resumed job must not trust it.
            next_part = os.path.join(b + ".lql-job", f"part-{kill_at // chunk:06d}.arrow.tmp")
            with open(next_part, "wb") as f:
                f.write(b"ARROW1\0\0 torn")

    result = run_job(STATEMENT, src, b, model=MODEL, chunk_size=chunk)
    assert result.chunks_resumed == second // chunk, seed
    assert not os.path.exists(b + ".lql-job")
    assert read_bytes(a) == read_bytes(b), f"seed {seed}: killed at {first} and {second}"


def test_resume_refuses_another_job(tmp_path):
    src = prompts_file(tmp_path, 9)
    out = str(tmp_path / "out.parquet")
    with pytest.raises(Stop):
        run_job(STATEMENT, src, out, model=MODEL, chunk_size=2, progress=stop_at(5))
    assert parts(out) == ["part-000000.arrow", "part-000001.arrow"]

    with pytest.raises(JobError, match="another job .*chunk_size"):
        run_job(STATEMENT, src, out, model=MODEL, chunk_size=3)
    with pytest.raises(JobError, match="another job .*statement"):
        run_job("INFER ? TOP 2", src, out, model=MODEL, chunk_size=2)
    other = prompts_file(tmp_path, 8, name="other.txt")
    os.replace(other, src)
    with pytest.raises(JobError, match="another job .*prompts, prompts_sha256"):
        run_job(STATEMENT, src, out, model=MODEL, chunk_size=2)
    prompts_file(tmp_path, 9)
    assert run_job(STATEMENT, src, out, model=MODEL, chunk_size=2).chunks_resumed == 2


def test_a_job_without_parts_can_be_replaced(tmp_path):
    src = prompts_file(tmp_path, 3)
    out = str(tmp_path / "out.parquet")
    with pytest.raises(Stop):
        run_job(STATEMENT, src, out, model=MODEL, chunk_size=4, progress=stop_at(1))
    assert parts(out) == []
    assert run_job("INFER ? TOP 1", src, out, model=MODEL, chunk_size=4).rows == 3


def test_one_process_per_job(tmp_path):
    src = prompts_file(tmp_path, 3)
    out = str(tmp_path / "out.parquet")
    with pytest.raises(Stop):
        run_job(STATEMENT, src, out, model=MODEL, chunk_size=1, progress=stop_at(1))
    fd = os.open(out + ".lql-job", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(JobError, match="another process"):
            run_job(STATEMENT, src, out, model=MODEL, chunk_size=1)
    finally:
        os.close(fd)
    assert run_job(STATEMENT, src, out, model=MODEL, chunk_size=1).chunks_resumed == 1


def test_invalid_jobs(tmp_path):
    src = prompts_file(tmp_path, 2)
    out = str(tmp_path / "out.parquet")
    with pytest.raises(FileNotFoundError, match="no prompts file"):
        run_job(STATEMENT, str(tmp_path / "missing.txt"), out, model=MODEL)
    with pytest.raises(FileNotFoundError, match="folder"):
        run_job(STATEMENT, src, str(tmp_path / "no" / "out.parquet"), model=MODEL)
    with pytest.raises(IsADirectoryError):
        run_job(STATEMENT, src, str(tmp_path), model=MODEL)
    with pytest.raises(ValueError, match="overwrite the prompts"):
        run_job(STATEMENT, src, src, model=MODEL)
    with pytest.raises(ValueError, match="chunk_size"):
        run_job(STATEMENT, src, out, model=MODEL, chunk_size=0)
    for statement in ("INFER 'x' TOP 3", "SELECT layer FROM layers WHERE layer < ? AND layer > ?"):
        with pytest.raises(ValueError, match="exactly one parameter"):
            run_job(statement, src, out, model=MODEL)
    with pytest.raises(ValueError, match="column named 'prompt'"):
        run_job("SELECT layer, ? AS prompt FROM layers LIMIT 1", src, out, model=MODEL)
    # The job's connection is read-only: a statement that writes files is refused.
    with pytest.raises(JobError, match="prompt 0 .*read-only"):
        run_job("TRACE ? SAVE 'x.trace'", src, out, model=MODEL)
    assert not os.path.exists(tmp_path / "x.trace") and not os.path.exists("x.trace")

    foreign = tmp_path / "mine.parquet.lql-job"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(JobError, match="not a job's work directory"):
        run_job(STATEMENT, src, str(tmp_path / "mine.parquet"), model=MODEL)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_cli(tmp_path):
    src = prompts_file(tmp_path, 5)
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    run_job(STATEMENT, src, a, model=MODEL, chunk_size=2)
    cli = [sys.executable, "-m", "lql", "job"]
    done = subprocess.run(cli + [STATEMENT, src, b, "--model", MODEL, "--chunk-size", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "chunk 1/3: 2/5 prompts, 6 rows",
        "chunk 2/3: 4/5 prompts, 12 rows",
        "chunk 3/3: 5/5 prompts, 15 rows",
    ]
    assert done.stdout == f"{b}: 15 rows from 5 prompts in 3 chunks\n"
    assert read_bytes(a) == read_bytes(b)

    bad = subprocess.run(cli + ["INFER 'x' TOP 3", src, b, "--model", MODEL], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "exactly one parameter" in bad.stderr
