"""What every room shares, below all of them: the schema, the names spelled once, text conventions, atomic writes.

Nothing here imports another room of rg-verl.
"""
