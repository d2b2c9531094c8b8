"""Hardware layout constructors (being written)."""
__all__: list[str] = []
