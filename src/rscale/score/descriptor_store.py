"""Moved: the descriptor-set format lives in :mod:`rscale.store.descriptor_set` (the store is the one
layer touching disk). This name stays only for branches written against the old path."""

from rscale.store.descriptor_set import DescriptorSet, check_vectors, write_descriptor_set  # noqa: F401
