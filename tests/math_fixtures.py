"""Small GSM8K and MATH files in the public datasets' own column layouts, written by tests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# (question, worked answer ending in "#### n", reference) in openai/gsm8k's layout
GSM8K_ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    },
    {
        "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
        "How much did she earn?",
        "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nShe earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    },
    {
        "question": "A town has 1,200 houses and builds 34 more. How many houses does it have?",
        "answer": "1200 + 34 = <<1200+34=1234>>1234\n#### 1,234",
    },
    {
        "question": "Betty has half of the $100 she needs. How much more does she need?",
        "answer": "She needs 100 / 2 = <<100/2=50>>50 more.\n#### 50",
    },
]
GSM8K_REFERENCES = ["72", "10", "1234", "50"]

# hendrycks/competition_math's layout: level is "Level n", the answer is the last \boxed{}
MATH_ROWS = [
    {
        "problem": "What is $\\frac{1}{4}+\\frac{1}{4}$?",
        "solution": "$\\frac{2}{4}=\\boxed{\\frac{1}{2}}$.",
        "level": "Level 1",
        "type": "Prealgebra",
    },
    {"problem": "Solve $2x = 6$.", "solution": "Divide: $x = \\boxed{3}$.", "level": "Level 2", "type": "Algebra"},
    {
        "problem": "Find $\\{x : x^2 = 1\\}$.",
        "solution": "First \\boxed{1}, then $\\boxed{\\{-1, 1\\}}$.",
        "level": "Level 3",
        "type": "Algebra",
    },
    {
        "problem": "What is $\\sqrt{12}$?",
        "solution": "$\\sqrt{12} = \\boxed{2\\sqrt{3}}$",
        "level": "Level 4",
        "type": "Geometry",
    },
    {
        "problem": "Evaluate $\\log_2 32$.",
        "solution": "$2^5 = 32$, so it is $\\boxed{5}$.",
        "level": "Level 5",
        "type": "Intermediate Algebra",
    },
    # no level, and a row without any boxed answer: both are handled
    {"problem": "Unknown level: what is $1+1$?", "solution": "$\\boxed{2}$", "level": "Level ?", "type": "Prealgebra"},
    {"problem": "A proof.", "solution": "Trivially true.", "level": "Level 3", "type": "Algebra"},
]

# the test files' rows: other questions than the training rows (validation and evaluation leave training
# questions out), with the answers, levels and types of the training rows they stand beside
GSM8K_TEST_ROWS = [
    {
        "question": "Natalia sold 48 clips in June and half as many in July. How many did she sell in the two months?",
        "answer": "48/2 = <<48/2=24>>24 in July, 48+24 = <<48+24=72>>72 in all.\n#### 72",
    },
    {
        "question": "Weng earns $12 an hour. Today she babysat for 50 minutes. How much did she earn today?",
        "answer": "12/60 = $<<12/60=0.2>>0.2 a minute, 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    },
]
MATH_TEST_ROWS = [
    {**MATH_ROWS[0], "problem": "What is $\\frac{3}{8}+\\frac{1}{8}$?"},
    {**MATH_ROWS[1], "problem": "Solve $3x = 9$."},
    {**MATH_ROWS[2], "problem": "Find the real solutions of $x^4 = 1$, as a set."},
    {**MATH_ROWS[3], "problem": "Simplify $\\sqrt{4}\\sqrt{3}$."},
    {**MATH_ROWS[4], "problem": "Evaluate $\\log_3 243$."},
]


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_math_dirs(root: Path) -> Path:
    """``root/gsm8k/{train,test}.parquet`` and ``root/math/{train,test}.jsonl``, the layout the math configs read."""
    write_parquet(root / "gsm8k" / "train.parquet", GSM8K_ROWS)
    write_parquet(root / "gsm8k" / "test.parquet", GSM8K_TEST_ROWS)
    write_jsonl(root / "math" / "train.jsonl", MATH_ROWS)
    write_jsonl(root / "math" / "test.jsonl", MATH_TEST_ROWS)
    return root
