"""Calling the user's code: resolving the functions a config names, what their signatures accept, running
coroutines from any thread."""
