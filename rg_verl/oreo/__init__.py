"""OREO (Wang et al. 2024): offline RL with a policy and a value model trained on the soft Bellman equation.

Collection, training on verl's engines, and the RFT baseline; ``docs/oreo.md`` describes them.
"""
