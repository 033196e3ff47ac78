"""keyshift models layer (see DESIGN.md)."""
