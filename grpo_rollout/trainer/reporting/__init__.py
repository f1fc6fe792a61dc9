"""What a run shows while it trains: the step's metrics, progress on the console or in a notebook, the final
summary, the command that resumes it."""
