"""Pure math: arrays in, arrays out, no I/O. Imports nothing from rscale but errors."""
