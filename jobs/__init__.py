"""keyshift jobs layer (see docs/design.md)."""
