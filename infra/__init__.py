"""netsynth infra: the service's shared infrastructure (settings, logging set-up, the task broker's configuration and
task names, rate limits), read by `api`, `workers` and `store`; it imports no other package of ours but `domain`."""
