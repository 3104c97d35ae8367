"""make verify: verdicts checked over a seeded, randomized matrix of engine runs."""
