"""netsynth synthesis: the AutoML engine (search, estimation, budgets, compression, delivery, explanations) over
`core/`; it tells a `synthesis.progress.Monitor` its progress and knows nothing of jobs or databases."""
