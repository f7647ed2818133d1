"""`.arrow()` against building the same frame from `fetchall()` tuples.

    python python/bench/arrow_vs_tuples.py [MODEL] [--reps N]

Runs `SELECT * FROM features` (46,080 rows on SmolLM2-135M: 30 layers × 1,536 features,
with their stored labels: the first run computes and caches them), then times, on the same
result, medians of N repetitions of:

- `rel.arrow()`: the Arrow C stream, one Arrow array per column;
- `rel.df()`: pandas through that Arrow table;
- `pandas.DataFrame(rel.fetchall(), columns=rel.columns)`: the frame built from tuples;
- `pyarrow.Table.from_pandas` of that frame: the Arrow table built from tuples.
"""

import argparse
import statistics
import time

import pandas as pd
import pyarrow as pa

import lql


def median_seconds(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()

    con = lql.connect(args.model)
    con.sql("SELECT * FROM features")  # labels computed and stored once
    rel = con.sql("SELECT * FROM features")
    n = len(rel)

    def tuples_frame():
        return pd.DataFrame(rel._result.rows(), columns=rel.columns)

    def tuples_arrow():
        return pa.Table.from_pandas(tuples_frame(), preserve_index=False)

    arrow = median_seconds(rel.arrow, args.reps)
    df = median_seconds(rel.df, args.reps)
    t_frame = median_seconds(tuples_frame, args.reps)
    t_arrow = median_seconds(tuples_arrow, args.reps)
    assert rel.arrow().num_rows == n == len(tuples_frame())
    assert rel.arrow().column("feature").to_pylist() == tuples_frame()["feature"].tolist()
    print(f"rows: {n}, columns: {rel.columns}")
    print(f"arrow():                         {arrow * 1e3:8.1f} ms")
    print(f"df() (through arrow):            {df * 1e3:8.1f} ms")
    print(f"DataFrame(fetchall()):           {t_frame * 1e3:8.1f} ms  ({t_frame / arrow:.1f}x arrow())")
    print(f"Table.from_pandas(fetchall()):   {t_arrow * 1e3:8.1f} ms  ({t_arrow / arrow:.1f}x arrow())")


if __name__ == "__main__":
    main()
