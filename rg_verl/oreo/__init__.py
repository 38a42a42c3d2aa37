"""OREO (Wang et al. 2024): collection, training on verl's engines, and the RFT baseline (``docs/oreo.md``)."""
