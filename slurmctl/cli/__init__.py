"""Command-line layer: click commands only."""
