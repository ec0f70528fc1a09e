"""netsynth store: persistence (database models, migrations, blob storage); its settings come from `infra`."""
