"""The Ray engine: extraction (Ray Data) and shard scoring (Ray tasks) over the same formats and
merges as the local engine. Ray is the ``distributed`` extra, imported only inside functions."""
