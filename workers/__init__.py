"""netsynth workers package (built in later issues)."""
