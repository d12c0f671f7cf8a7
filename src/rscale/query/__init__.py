"""The query language: measures now, full queries with the registry."""
