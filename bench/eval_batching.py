#!/usr/bin/env python
"""Evaluation batching benchmark: the hf backend batched against one prompt at a time (and vLLM when a GPU is present).

    python bench/eval_batching.py [--prompts 32] [--batch-size 32] [--max-tokens 32] [--model-path DIR]
"""

from rg_verl.evaluation.bench import main

if __name__ == "__main__":
    main()
