"""netsynth synthesis package (built in later issues)."""
