"""The decide room: every variant through the same gates and sweep, and which one to run."""
