"""Producers: heavy-dependency stages (feature extraction, reranking, fine-tuning, lineage).

Everything here imports torch/transformers/mlflow lazily, inside functions, and raises
MissingExtraError naming the extra to install when they are absent. Nothing on the query path
imports this package.
"""
