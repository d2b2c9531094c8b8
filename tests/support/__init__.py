"""Test helpers shared across test folders (the IR reference executor)."""
