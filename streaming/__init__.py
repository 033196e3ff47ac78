"""keyshift streaming layer (see docs/design.md)."""
