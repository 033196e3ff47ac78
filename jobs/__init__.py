"""keyshift jobs layer (see DESIGN.md)."""
