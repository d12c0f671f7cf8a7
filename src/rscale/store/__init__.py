"""The only layer touching disk: file formats now, the registry next."""
