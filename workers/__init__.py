"""netsynth workers: the Celery app and its thin tasks (load a job by id, run the engine, save through `store/`),
and the offline `netsynth synthesize` and `netsynth explain` commands that run the same engine on local files."""
