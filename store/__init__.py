"""netsynth store: persistence (database models, migrations, blob storage) and settings."""
