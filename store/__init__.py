"""netsynth store package (built in later issues)."""
