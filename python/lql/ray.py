"""The batch job on Ray Data: the scale-out path for jobs that outgrow one machine.

>>> import ray
>>> from lql.ray import run_on_ray
>>> ray.init()                      # or ray.init(address="auto") on a cluster
>>> run_on_ray("INFER ? TOP 3", "prompts.txt", "out.parquet", concurrency=2)

:func:`run_on_ray` reads the prompts with ``ray.data.read_text`` (the prompts
:func:`lql.job.read_prompts` gives, numbered the same way), runs the statement with
``map_batches`` on a pool of actors, each holding one :class:`RunStatement` (one LQL
connection, opened once per actor; the model file is memory-mapped, so the actors of a
machine share its pages through the OS page cache and the model is in memory once per
machine), and writes the rows, in prompt order, into one Parquet file with the writer
:func:`lql.job.run_job` uses: the same rows, the same schema, the same bytes.

:class:`RunStatement` is usable on its own in a pipeline of yours:
``ds.map_batches(RunStatement, fn_constructor_args=("INFER ? TOP 3",),
batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=4))`` over a dataset with
``text`` (the prompt) and ``prompt_index`` (int64) columns (:func:`prompts_dataset` makes
one from a text file).

Ray is imported when a function here needs it (``pip install 'lql[ray]'``); the module
itself needs only pyarrow.
"""

from __future__ import annotations

import itertools
from typing import Optional

import pyarrow as pa

from ._connection import connect
from .job import (
    DEFAULT_COMPRESSION,
    DEFAULT_MODEL,
    DEFAULT_ROW_GROUP_SIZE,
    JobError,
    check_statement,
    run_prompts,
    unify,
    write_parquet,
)

DEFAULT_BATCH_SIZE = 16


class RunStatement:
    """A ``map_batches`` callable class (``batch_format="pyarrow"``): one LQL connection per
    actor, read-only. A batch is a ``pyarrow.Table`` with ``text`` (the prompt) and
    ``prompt_index`` columns; the result holds the statement's rows for each prompt, in
    order, led by ``prompt_index`` and ``prompt`` (the columns :func:`lql.job.run_job`
    writes)."""

    def __init__(self, statement: str, model: Optional[str] = DEFAULT_MODEL, offline: bool = False):
        self._con = connect(model, offline=offline, read_only=True)
        check_statement(self._con, statement)
        self._statement = statement

    def __call__(self, batch):
        return run_prompts(
            self._con,
            self._statement,
            batch.column("prompt_index").to_pylist(),
            batch.column("text").to_pylist(),
        )


def prompts_dataset(prompts_path: str):
    """The prompts of a text file as a Ray dataset of ``text`` and ``prompt_index``
    (int64) columns: ``ray.data.read_text``'s blocks, in file order, each numbered on the
    cluster from the row counts of the blocks before it (the text stays in the object
    store)."""
    import ray

    text = ray.data.read_text(prompts_path, drop_empty_lines=True)
    text.context.execution_options.preserve_order = True
    blocks = text.to_arrow_refs()
    counts = ray.get([ray.remote(_num_rows).remote(block) for block in blocks])
    offsets = itertools.accumulate([0] + counts[:-1])
    return ray.data.from_arrow_refs(
        [ray.remote(_numbered).remote(block, offset) for block, offset in zip(blocks, offsets)]
    )


def _num_rows(block) -> int:
    return block.num_rows


def _numbered(block, offset: int):
    return block.append_column("prompt_index", pa.array(range(offset, offset + block.num_rows), pa.int64()))


def run_on_ray(
    statement: str,
    prompts_path: str,
    output_path: str,
    *,
    model: Optional[str] = DEFAULT_MODEL,
    offline: bool = False,
    concurrency: int = 2,
    batch_size: int = DEFAULT_BATCH_SIZE,
    num_cpus: float = 1,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    compression: str = DEFAULT_COMPRESSION,
) -> int:
    """Runs ``statement`` over the prompts of ``prompts_path`` on the current Ray cluster
    (``concurrency`` actors of ``num_cpus`` CPUs each, ``batch_size`` prompts a call) and
    writes the Parquet file :func:`lql.job.run_job` writes; returns the number of rows.
    The output is written on the driver (a temporary name, renamed last); a killed run
    starts again from the beginning (use :func:`lql.job.run_job` for a resumable one)."""
    import ray

    mapped = prompts_dataset(prompts_path).map_batches(
        RunStatement,
        fn_constructor_args=(statement, model, offline),
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        num_cpus=num_cpus,
    )
    mapped.context.execution_options.preserve_order = True
    rows = mapped.materialize()
    schema = unify(block.schema for block in _blocks(rows))
    return write_parquet(output_path, schema, _in_prompt_order(_blocks(rows)), row_group_size, compression)


def _blocks(ds):
    return ds.iter_batches(batch_size=None, batch_format="pyarrow")


def _in_prompt_order(blocks):
    """The blocks, checked to come in prompt order."""
    last = -1
    for block in blocks:
        indices = block.column("prompt_index").to_pylist()
        if indices and (indices[0] < last or indices != sorted(indices)):
            raise JobError("Ray returned the rows out of prompt order")
        last = indices[-1] if indices else last
        yield block
