"""Value-guided search at test time: OREO's value model V chooses between sampled continuations.

- ``beam``: the two search loops (step-level beam search, best-of-K reranking) over ``expand`` and ``value``
  callables;
- ``steps``: where a reasoning step ends, the rule every expander shares;
- ``hf``, ``vllm``: the expanders (and the transformers value scorer) the evaluator's search backends drive.

The evaluator (``decoding: value_beam`` / ``value_rerank``) and OREO's training both use it; it imports neither.
"""
