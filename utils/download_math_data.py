#!/usr/bin/env python
"""Download GSM8K and MATH from the Hugging Face hub into the files the math configs read.

    python utils/download_math_data.py [--out data]

writes, in each dataset's own column layout:

    <out>/gsm8k/train.parquet, <out>/gsm8k/test.parquet   openai/gsm8k (main): question, answer
    <out>/math/train.jsonl, <out>/math/test.jsonl         EleutherAI/hendrycks_math, its 7 subjects
                                                          together: problem, level, type, solution

The configs in configs/math/ read them from ``data/`` under the working directory, or from
``$RG_VERL_DATA``. Each file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from pathlib import Path

from rg_verl.common.atomic import write_atomic

GSM8K = ("openai/gsm8k", "main")
MATH = "EleutherAI/hendrycks_math"
MATH_SUBJECTS = (
    "algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory", "prealgebra",
    "precalculus",
)  # fmt: skip


def _write(table, path: Path) -> None:
    """``table`` (a ``datasets.Dataset``) as parquet or JSON lines, by ``path``'s suffix, written atomically."""
    data = io.BytesIO()
    if path.suffix == ".parquet":
        table.to_parquet(data)
    else:
        table.to_json(data, lines=True, force_ascii=False)
    write_atomic(path, data.getvalue())
    print(f"{path}: {len(table)} rows")


def download(out: Path) -> None:
    """Write the four files under ``out``; raises whatever ``datasets`` raises when the hub is unreachable."""
    from datasets import concatenate_datasets, load_dataset

    for split in ("train", "test"):
        _write(load_dataset(*GSM8K, split=split), out / "gsm8k" / f"{split}.parquet")
        subjects = [load_dataset(MATH, subject, split=split) for subject in MATH_SUBJECTS]
        _write(concatenate_datasets(subjects), out / "math" / f"{split}.jsonl")


def main(argv: Sequence[str] | None = None) -> int:
    head, _, rest = __doc__.partition("\n\n")
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=formatter)
    parser.add_argument("--out", type=Path, default=Path("data"), help="output folder (default: data)")
    args = parser.parse_args(argv)
    try:
        download(args.out)
    except Exception as error:  # no network, no such dataset: say so in one line
        print(f"error: could not download from the Hugging Face hub: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
