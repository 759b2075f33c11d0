"""Tasks: schema and loaders, graders, validation, generation from real repos, evaluation."""
