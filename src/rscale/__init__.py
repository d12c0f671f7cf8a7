"""rscale: tail-aware retrieval evaluation at any gallery size.

Per-query hardness (the share of a query's distractor score law above each positive)
turns a small uniform distractor sample into any retrieval metric at any gallery size N.
Importing this package loads numpy only; heavy producers import lazily.
"""

__version__ = "0.1.0"
