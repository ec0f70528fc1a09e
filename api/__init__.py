"""netsynth api package (built in later issues)."""
