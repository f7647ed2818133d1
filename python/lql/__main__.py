"""``python -m lql job STATEMENT PROMPTS OUTPUT``: a batch job from the command line.

Runs :func:`lql.job.run_job`; progress goes to stderr, one line per finished chunk, and the
summary to stdout. Run the same command again after a kill to resume the job.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import _lql
from .job import DEFAULT_CHUNK_SIZE, DEFAULT_COMPRESSION, DEFAULT_MODEL, DEFAULT_ROW_GROUP_SIZE, JobError, Progress, run_job


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lql", description="LQL from Python")
    commands = parser.add_subparsers(dest="command", required=True)
    job = commands.add_parser("job", help="run a statement over a file of prompts into Parquet (resumable)")
    job.add_argument("statement", help="a statement with one ? parameter, e.g. \"INFER ? TOP 3\"")
    job.add_argument("prompts", help="a text file, one prompt a line (blank lines skipped)")
    job.add_argument("output", help="the Parquet file to write")
    job.add_argument("--model", default=DEFAULT_MODEL, help=f"model to open (default {DEFAULT_MODEL})")
    job.add_argument("--offline", action="store_true", help="refuse a catalogue model that is not cached")
    job.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="prompts per part (default %(default)s)")
    job.add_argument("--row-group-size", type=int, default=DEFAULT_ROW_GROUP_SIZE, help="Parquet rows per group (default %(default)s)")
    job.add_argument("--compression", default=DEFAULT_COMPRESSION, help="Parquet compression (default %(default)s)")
    job.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def _chunk_printer(chunk_size: int):
    """A progress callback printing a line as each chunk ends (prompts done reach its end)."""

    def show(p: Progress) -> None:
        if p.prompts_done == min(p.chunks_done * chunk_size, p.prompts):
            print(f"chunk {p.chunks_done}/{p.chunks}: {p.prompts_done}/{p.prompts} prompts, {p.rows} rows", file=sys.stderr, flush=True)

    return show


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        result = run_job(
            args.statement,
            args.prompts,
            args.output,
            model=args.model,
            offline=args.offline,
            chunk_size=args.chunk_size,
            row_group_size=args.row_group_size,
            compression=args.compression,
            progress=None if args.quiet else _chunk_printer(args.chunk_size),
        )
    except (JobError, _lql.Error, OSError, ValueError) as e:
        print(f"lql job: {e}", file=sys.stderr)
        return 1
    resumed = f" ({result.chunks_resumed} resumed)" if result.chunks_resumed else ""
    print(f"{result.output}: {result.rows} rows from {result.prompts} prompts in {result.chunks} chunks{resumed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
