"""What every room shares, below all of them: the schema helpers (``schema``: ``ConfigError``, typed sections), the
names spelled once (``names``: splits, data sources, tags, seeds), the text conventions (``final_answer``,
``chat_template``), where a transformers generation ends (``hf_generate``), means per label (``stats``), a
tokenizer's fingerprint (``tokenizer``) and atomic writes (``atomic``).

Nothing here imports another room of rg-verl.
"""
