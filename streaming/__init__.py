"""keyshift streaming layer (see DESIGN.md)."""
