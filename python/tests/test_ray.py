"""The Ray Data recipe: the batch job on a local Ray cluster, against the single-process job."""

import os
import sys

import pytest

import lql.ray
from conftest import MODEL, require
from lql.job import read_prompts, run_job, run_prompts

pa = require("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "prompts.txt")
STATEMENT = "INFER ? TOP 3"

# Ray's own DataContext sets attributes it deprecates.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")


class LoggingRunStatement(lql.ray.RunStatement):
    """RunStatement that notes which process ran each batch in ``log`` (a file)."""

    log = None

    def __call__(self, batch):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return super().__call__(batch)


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster: two actors of one CPU each, and a CPU for the read tasks."""
    ray = require("ray")
    ray.init(
        num_cpus=3,
        object_store_memory=200 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    # The actors unpickle LoggingRunStatement: send it by value (this module is not on their path).
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


def test_run_statement_batch(con):
    from lql.ray import RunStatement

    prompts = read_prompts(DATA)[:3]
    batch = pa.table({"text": prompts, "prompt_index": pa.array([7, 8, 9], pa.int64())})
    rows = RunStatement(STATEMENT, MODEL)(batch)
    assert rows.equals(run_prompts(con, STATEMENT, [7, 8, 9], prompts))
    assert rows.column("prompt_index").to_pylist() == [7] * 3 + [8] * 3 + [9] * 3


def test_ray_job_gives_the_single_process_rows(ray_cluster, tmp_path, monkeypatch):
    from lql.ray import prompts_dataset, run_on_ray

    single, on_ray = str(tmp_path / "single.parquet"), str(tmp_path / "ray.parquet")
    run_job(STATEMENT, DATA, single, model=MODEL, chunk_size=32)

    ds = prompts_dataset(DATA)
    assert ds.count() == 200
    assert ds.take(2) == [
        {"text": "The capital of France is", "prompt_index": 0},
        {"text": "The capital of Japan is", "prompt_index": 1},
    ]

    log = tmp_path / "batches.log"
    monkeypatch.setattr(LoggingRunStatement, "log", str(log))
    monkeypatch.setattr(lql.ray, "RunStatement", LoggingRunStatement)
    rows = run_on_ray(STATEMENT, DATA, on_ray, model=MODEL, concurrency=2, batch_size=16)
    assert rows == 600
    pids = log.read_text().split()
    assert len(set(pids)) == 2, "two actors share the batches"
    a, b = pq.read_table(single), pq.read_table(on_ray)
    assert b.schema == a.schema
    assert b.to_pylist() == a.to_pylist()
    assert b.column("prompt_index").to_pylist() == [i for i in range(200) for _ in range(3)]
    # One writer, the same rows: the same file.
    with open(single, "rb") as fa, open(on_ray, "rb") as fb:
        assert fa.read() == fb.read()
