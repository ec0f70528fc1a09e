"""netsynth synthesis: the AutoML engine (search, estimation, budgets, compression, delivery, explanations) over
`core/`; it reports progress through `synthesis.progress.Reporter` and knows nothing of jobs or databases."""
